"""An untrusted candidate's offline GPU compile report: registers, spills, shared memory and programs
per SM of every kernel its forward launches, for a GPU target (sm_90a by default), on any machine.

`aka kb compile-check` (aka/kb/compile_check.py) does this in-process for the knowledge base's own
kernels. A candidate from the agent is not trusted code, so here the compile runs in a separate,
disposable process started the way the evaluation's runner is (aka/evaluate/confine.py): where the
machine allows, its own mount and network namespaces with everything read-only but its directory,
the knowledge base and caches hidden, an unprivileged user, a scrubbed environment. Unlike the
runner it may start processes (ptxas reads the PTX), which is why it is not the runner.

The report is advice for the proposer, never a verdict: it comes from the candidate's own process,
so a candidate could write anything into it. It is parsed as data (numbers and short strings, a
bounded number of launches) and shown to the agent as what the compiler said about that candidate.

    report = compile_report("bench/ops/rms_norm", source, ["0"])   # -> dict (see _clean)
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

from aka.kb.compile_check import dot_notes, wait_notes

MARK = "AKA_COMPILE_REPORT "
MAX_LAUNCHES = 24
_INT_KEYS = ("num_warps", "shared_bytes", "registers", "spill_bytes", "ctas_per_sm")


def compile_report(problem: str | Path, source: str, shape_ids: list[str] | None = None, capability: int = 90,
                   timeout_s: float = 240.0) -> dict:
    """Compile `source`'s kernels for `capability` on the problem's shapes (default: its small shapes)
    in a confined process. Returns {"available": bool, "capability", "launches": [...], "error",
    "confinement"}; "available" False says why not (no Triton CUDA backend, a timeout)."""
    from aka.evaluate.confine import NOBODY, confine_prefix, give_to_nobody, hidden_paths
    from aka.evaluate.sandbox import scrubbed_env
    from aka.hardware import cache_dir
    from aka.problem import load_problem

    prob = load_problem(problem)
    tmp = Path(tempfile.mkdtemp(prefix="aka-compile-"))
    try:
        cand = tmp / "candidate.py"
        cand.write_text(source)
        job = {"problem": str(prob.root), "candidate": str(cand), "shapes": list(shape_ids or []),
               "capability": int(capability)}
        (tmp / "job.json").write_text(json.dumps(job))
        (tmp / "home").mkdir()
        env = scrubbed_env({"HOME": str(tmp / "home"), "TMPDIR": str(tmp), "TRITON_CACHE_DIR": str(tmp / "triton"),
                            "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""})
        # hidden as from the runner, but the problem's directory stays readable: the child builds the
        # shapes' inputs itself (read-only, and what it reads there only shapes its own report)
        hidden = hidden_paths(SimpleNamespace(problem={}), cache_dir())
        prefix, info = confine_prefix([str(tmp)], hidden, "cpu", "auto")
        if info.get("user") == NOBODY:
            give_to_nobody([str(tmp)])
        argv = prefix + [sys.executable, "-m", "aka.evaluate.compile_report", str(tmp / "job.json")]
        try:
            p = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=timeout_s,
                               start_new_session=True)
        except subprocess.TimeoutExpired:
            return {"available": False, "reason": f"the offline compile took over {timeout_s:.0f} s",
                    "capability": capability, "confinement": info}
        line = next((x for x in reversed(p.stdout.splitlines()) if x.startswith(MARK)), None)
        if line is None:
            tail = (p.stderr or p.stdout or "").strip().splitlines()[-1:] or [f"exit status {p.returncode}"]
            return {"available": False, "reason": tail[0][:300], "capability": capability, "confinement": info}
        try:
            out = _clean(json.loads(line[len(MARK):]))
        except (ValueError, TypeError, AttributeError) as e:
            return {"available": False, "reason": f"unreadable report ({type(e).__name__})", "capability": capability,
                    "confinement": info}
        out["capability"], out["confinement"] = capability, info
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _clean(raw: dict) -> dict:
    """The child's JSON as data: known keys, ints, short strings, at most MAX_LAUNCHES launches."""
    def num(v):
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1 << 40 else None

    def text(v, n=200):
        return str(v)[:n] if v is not None else None

    launches = []
    for lr in list(raw.get("launches") or [])[:MAX_LAUNCHES]:
        if not isinstance(lr, dict):
            continue
        d = {"kernel": text(lr.get("kernel"), 80) or "?", "error": text(lr.get("error"))}
        d.update({k: num(lr.get(k)) for k in _INT_KEYS})
        # of the SASS profile only two numbers: the kernel's instructions and its largest loop body,
        # the issue cost of one trip of its main loop (compile_check.parse_sass)
        sass = lr.get("sass") if isinstance(lr.get("sass"), dict) else {}
        loops = sass.get("loops") if isinstance(sass.get("loops"), list) else []
        d["sass_instructions"] = num(sass.get("instructions"))
        d["largest_loop"] = max((n for n in map(num, loops[:64]) if n is not None), default=None)
        # the tensor-core dots (compile_check.mma_dots): shape, warps, and how often each is computed
        # (a dot without every number is left out: dot_notes reads them all)
        dots = ({"m": num(x.get("m")), "n": num(x.get("n")), "dup": num(x.get("dup")),
                 "warps": [num(w) for w in list(x.get("warps") or [])[:2]],
                 "instr": [num(w) for w in list(x.get("instr") or [])[:3]]}
                for x in list(lr.get("dots") or [])[:8] if isinstance(x, dict))
        d["dots"] = [x for x in dots if x["m"] and x["n"] and x["dup"] and len(x["warps"]) == 2
                     and None not in x["warps"] and len(x["instr"]) >= 2 and None not in x["instr"][:2]]
        # the wgmma groups and waits (compile_check.wgmma_waits): counts only
        w = lr.get("wgmma") if isinstance(lr.get("wgmma"), dict) else {}
        waits = [num(x) for x in list(w.get("waits") or [])[:32]]
        d["wgmma"] = ({"commits": num(w.get("commits")), "waits": waits}
                      if num(w.get("commits")) and None not in waits else {})
        launches.append(d)
    return {"available": bool(raw.get("available", True)), "ok": bool(raw.get("ok")),
            "error": text(raw.get("error"), 300), "reason": text(raw.get("reason"), 300), "launches": launches}


def refused_launches(report: dict | None) -> list[dict]:
    """The launches the GPU compiler refused (none when the report is missing or unavailable)."""
    if not report or not report.get("available"):
        return []
    return [lr for lr in report.get("launches") or [] if lr.get("error")]


def _launch_dot_lines(lr: dict) -> list[str]:
    return [f"{lr['kernel']}: {note}" for note in dot_notes(lr.get("dots") or [])]


def dot_lines(report: dict | None) -> list[str]:
    """The report's dots computed more than once, one line each: '<kernel>: dot 64x64 computed 2x ...'."""
    if not report or not report.get("available"):
        return []
    return [line for lr in report.get("launches") or [] if not lr.get("error") for line in _launch_dot_lines(lr)]


def summary_lines(report: dict | None, limit: int = 8) -> list[str]:
    """One line per compiled launch, as the agent's prompt shows it."""
    if not report:
        return []
    if not report.get("available"):
        return [f"offline compile unavailable: {report.get('reason') or 'unknown'}"]
    arch = f"sm_{report.get('capability', 90)}a"
    out = []
    if report.get("error"):
        out.append(f"{arch} compile not completed: {report['error']}")
    for lr in report.get("launches", [])[:limit]:
        if lr.get("error"):
            out.append(f"{lr['kernel']}: does not compile for {arch}: {lr['error']}")
            continue
        sb = lr.get("shared_bytes")
        smem = "shared ?" if sb is None else (f"{sb / 1024:.0f} KB shared" if sb >= 1024 else f"{sb} B shared")
        spill = f", {lr['spill_bytes']} B spilled" if lr.get("spill_bytes") else ", no spills"
        ctas = f", {lr['ctas_per_sm']} program(s) per SM" if lr.get("ctas_per_sm") is not None else ""
        nw = lr.get('num_warps')
        sass = ""
        if lr.get("sass_instructions"):
            sass = f", {lr['sass_instructions']} SASS instructions" + (
                f" (largest loop body {lr['largest_loop']})" if lr.get("largest_loop") else "")
        out.append(f"{lr['kernel']} ({nw} warp{'' if nw == 1 else 's'}): {lr.get('registers')} registers{spill}, "
                   f"{smem}{ctas}{sass}")
        out += _launch_dot_lines(lr)
        out += [f"{lr['kernel']}: {note}" for note in wait_notes(lr.get("wgmma") or {})]
    return out


def _child(job_path: str) -> int:
    """In the confined process: import the candidate, compile its launches, print one MARK line."""
    job = json.loads(Path(job_path).read_text())
    try:
        import triton.backends.nvidia  # noqa: F401 - the CUDA backend compiles without a GPU
    except Exception as e:  # noqa: BLE001 - said in the report
        print(MARK + json.dumps({"available": False, "reason": f"no Triton CUDA backend: {type(e).__name__}"}))
        return 0
    from dataclasses import asdict

    from aka.kb.compile_check import compile_check
    try:
        rep = compile_check(job["problem"], job["candidate"], job["shapes"] or None, capability=job["capability"],
                            sass=True)
        out = {"available": True, "ok": rep.ok, "error": rep.error,
               "launches": [{k: v for k, v in asdict(lr).items() if k != "constants" and k != "mem"}
                            for lr in rep.launches]}
    except Exception as e:  # noqa: BLE001 - a candidate that does not import or build is reported as such
        out = {"available": True, "ok": False, "error": f"{type(e).__name__}: {str(e)[:240]}", "launches": []}
    print(MARK + json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(_child(sys.argv[1]))

"""Turn a device run's $OUT folder into committed tables with provenance.

    mkdir -p /tmp/gpu && tar xzf <files_at>/results.tgz -C /tmp/gpu
    python scripts/collect_gpu.py /tmp/gpu/harness [--dest results/h200/harness]

Reads provenance.txt, calibration.json, gpu_results.jsonl, pytest logs and eval JSONs written by
`scripts/gpu_run.sh harness`; writes markdown tables plus the raw files they were made from.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aka.util import fmt  # noqa: E402


def _gpu_cases() -> dict:
    """name -> the Case of tests/test_adversarial.py's GPU list (expected status and cause)."""
    try:
        from tests.test_adversarial import GPU_CASES
    except Exception:  # noqa: BLE001 - the table then shows '?' for the expectations
        return {}
    return {c.name: c for c in GPU_CASES}


def table(title: str, cols: list[str], lines: list[str], intro: str = "") -> list[str]:
    """A section: its heading, an optional paragraph, a markdown table of these columns over the given
    row lines, a blank line."""
    return [f"## {title}", "", *([intro, ""] if intro else []), "| " + " | ".join(cols) + " |",
            "|" + "---|" * len(cols), *lines, ""]


def adversarial_outcomes(src: Path) -> tuple[list[tuple[str, str, float | None]], str]:
    """(case, outcome, seconds) of each GPU adversarial case: from junit_gpu.xml, or where a run was cut
    before pytest wrote its junit, from the `-v` log of the judge part (par_judge.log: a line per finished
    test, no durations), with a sentence saying how many of the collected items finished."""
    junit = src / "junit_gpu.xml"
    if junit.exists():
        import xml.etree.ElementTree as ET
        out = []
        for c in ET.parse(junit).iter("testcase"):
            if c.get("name", "").startswith("test_gpu_verdict"):
                tags = {x.tag for x in c}
                outcome = ("FAILED" if tags & {"failure", "error"} else "xfail (known gap)" if "skipped" in tags
                           else "pass")
                out.append((c.get("name")[len("test_gpu_verdict"):].strip("[]"), outcome, float(c.get("time"))))
        return out, ""
    log = src / "par_judge.log"
    if not log.exists():
        return [], ""
    text = log.read_text()
    words = {"PASSED": "pass", "FAILED": "FAILED", "ERROR": "FAILED", "XFAIL": "xfail (known gap)", "XPASS": "FAILED"}
    seen = {}
    for m in re.finditer(r"\b(PASSED|FAILED|ERROR|XFAIL|XPASS) tests/test_adversarial\.py::test_gpu_verdict\[([^\]]+)\]", text):
        seen[m.group(2)] = words[m.group(1)]
    done = len(re.findall(r"\b(?:PASSED|FAILED|ERROR|XFAIL|XPASS) tests/", text))
    items = re.search(r"\[(\d+) items?\]", text)
    cut = (f"From the `-v` log (`par_judge.log`): the run was stopped before pytest wrote its junit; {done} of "
           f"{items.group(1) if items else '?'} collected tests finished, these {len(seen)} of them adversarial cases.")
    return sorted((n, o, None) for n, o in seen.items()), cut


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--dest", default="results/h200/harness")
    ap.add_argument("--note", default="", help="a line under the provenance (e.g. which commit ran)")
    ap.add_argument("--no-raw", action="store_true", help="no copy of the source files under DEST/raw "
                    "(they are committed where they are)")
    a = ap.parse_args()
    src, dest = Path(a.src), Path(a.dest)
    dest.mkdir(parents=True, exist_ok=True)
    if not a.no_raw:
        raw = dest / "raw"
        raw.mkdir(exist_ok=True)
        for p in src.iterdir():
            if p.is_file() and p.stat().st_size < 2_000_000:
                shutil.copy(p, raw / p.name)
    prov = (src / "provenance.txt").read_text().strip() if (src / "provenance.txt").exists() else "unknown"
    # the GPU's name: nvidia-smi's first field on the line under its csv header
    plines = prov.splitlines()
    gpu = plines[1].split(",")[0].strip() if len(plines) > 1 and plines[0].startswith("name") else "the GPU"
    out = [f"# Measurement acceptance on {gpu}", "", "Produced by `bash scripts/gpu_run.sh harness` (or `adv`, the adversarial part alone,",
           "or `scripts/gpu_judge_accept.sh`) on the device, then `python scripts/collect_gpu.py <out>`. Provenance:",
           "", "```", prov, "```", ""]
    for extra in sorted(src.glob("provenance_*.txt")):
        out += [f"`{extra.name}`:", "", "```", extra.read_text().strip(), "```", ""]
    if a.note:
        out += [a.note, ""]
    rows = [json.loads(l) for l in (src / "gpu_results.jsonl").read_text().splitlines() if l.strip()] \
        if (src / "gpu_results.jsonl").exists() else []
    rep = [r for r in rows if r["kind"] == "repeatability"]
    if rep:
        out += table("The same kernel timed twice in one run (RMSNorm, bf16)",
                     ["shape", "method", "run A µs", "run B µs", "spread", "limit"],
                     [f"| {r['shape'][0]}x{r['shape'][1]} | {r['method']} | {fmt(r['a_us'], '.3f')} "
                      f"| {fmt(r['b_us'], '.3f')} | {r['spread']:.2%} | {r['limit']:.0%} |" for r in rep])
    ka = [r for r in rows if r["kind"].startswith("known_")]
    if ka:
        lines = []
        for r in ka:
            if r["kind"] == "known_matmul":
                lines.append(f"| bf16 8192³ cuBLAS (eager reference) | {fmt(r['eager_us'], '.2f')} | - "
                             f"| {fmt(r['eager_mfu'], '.2f')} | - |")
                lines.append(f"| bf16 8192³ Triton candidate | {fmt(r['time_us'], '.2f')} | - "
                             f"| {fmt(r['candidate_mfu'], '.2f')} | - |")
            else:
                lines.append(f"| {r['kind'][6:]} {r.get('shape', '')} | {fmt(r['time_us'], '.2f')} "
                             f"| {fmt(r.get('iou'), '.2f')} | - | {fmt(r.get('sol_fraction'), '.4f')} |")
        out += table("Known answers", ["case", "time µs", "IOU", "MFU", "SOL fraction"], lines)
    three = [r for r in rows if r["kind"] == "three_ops"]
    if three:
        out += table("Candidate, eager and torch.compile on three operators (cold L2, interleaved)",
                     ["op", "shape", "method", "cand µs", "95% CI", "eager µs", "compile µs", "×eager", "×compile",
                      "SOL frac", "un-graphed µs/call"],
                     [f"| {r['op']} | {r['label']} | {r['method']} | {fmt(r['time_us'], '.2f')} "
                      f"| {fmt((r.get('ci') or [None, None])[0], '.2f')}–{fmt((r.get('ci') or [None, None])[1], '.2f')} "
                      f"| {fmt(r['eager_us'], '.2f')} | {fmt(r['compile_us'], '.2f')} | {fmt(r['speedup_eager'], '.2f')} "
                      f"| {fmt(r['speedup_compile'], '.2f')} | {fmt(r['sol_fraction'], '.2f')} "
                      f"| {fmt(r['eager_call_us'], '.2f')} |" for r in three])
    par = [r for r in rows if r["kind"] == "parallel"]
    if par:
        out += table("Four evaluations at once against one alone (rms_norm, GPU lock)",
                     ["shape", "alone µs", "in parallel µs", "spread", "limit", "that evaluation's wait for the GPU s"],
                     [f"| {r['shape']} | {fmt(r['solo_us'], '.2f')} | {fmt(r['parallel_us'], '.2f')} | {r['spread']:.2%} "
                      f"| {r['limit']:.0%} | {fmt(r['gpu_wait_s'], '.1f')} |" for r in par])
    hb = [r for r in rows if r["kind"] == "host_bound_sized"]
    if hb:
        calls = (("fast", "copy"), ("slow", "copy after 2 ms of host sleep"),
                 ("past_cap", "copy after 12 ms of host sleep (past the 10 ms cap)"))
        note = lambda r, name: ((r.get("notes") or {}).get(name) or "-").split(":")[0]  # noqa: E731
        out += table("Event timing behind a head start sized to the host path (ShapeTimer, one 3x-L2 set)",
                     ["call", "host path µs (median)", "spin µs", "timed µs", "note"],
                     [f"| {what} | {fmt(r.get(f'{name}_host_us'), '.1f')} | {fmt(r.get(f'{name}_spin_us'), '.0f')} "
                      f"| {fmt(r[f'{name}_us'], '.1f')} | {note(r, name)} |"
                      for r in hb for name, what in calls if f"{name}_us" in r])
    hc = [r for r in rows if r["kind"] == "host_bound_candidate"]
    if hc:
        out += table("A host-bound candidate through judge and runner (`copy_chunked`: 200 launches, 1 GB)",
                     ["status", "timed µs", "host path µs", "spin µs", "its kernels µs (profiler)", "copy.py µs",
                      "host-bound note"],
                     [f"| {r['status']} | {fmt(r['chunked_us'], '.1f')} | {fmt(r['host_us'], '.1f')} "
                      f"| {fmt(r['head_start_us'], '.0f')} | {fmt(r.get('kernels_us'), '.1f')} | {fmt(r['plain_us'], '.1f')} "
                      f"| {'yes' if r.get('notes') else 'no'} |" for r in hc])
    cal = src / "calibration.json"
    if cal.exists():
        try:
            c = json.loads(cal.read_text())
            from aka.hardware import match_spec
            spec = match_spec(gpu)   # the datasheet figures of the GPU the provenance names
            ds = (lambda v: f" (datasheet {v:g})") if spec else (lambda v: "")
            pk = spec.peak_tflops if spec else {}
            out += ["## `aka hw calibrate`", "", f"copy {c['copy_tbps']:.2f} TB/s{ds(spec.mem_tbps) if spec else ''}, "
                    f"bf16 matmul {c['bf16_tflops']:.0f} TFLOP/s{ds(pk['bf16']) if 'bf16' in pk else ''}, fp8 matmul "
                    f"{c.get('fp8_tflops', 0):.0f} TFLOP/s{ds(pk['fp8']) if 'fp8' in pk else ''}; raw: "
                    f"`{'raw/' if not a.no_raw else str(src) + '/'}calibration.json`", ""]
        except (json.JSONDecodeError, KeyError):
            pass
    ev = src / "eval_rms_norm_10shapes.json"
    if ev.exists():
        e = json.loads(ev.read_text())
        out += ["## Harness overhead: `aka eval` of a 10-shape problem (rms_norm, shapes 0–9)", "",
                f"status {e['status']}; wall seconds: " + ", ".join(f"{k} {v}" for k, v in e["wall_s"].items()), ""]
    nc = src / "eval_rms_norm_ncu.json"
    if nc.exists():
        e = json.loads(nc.read_text())
        for s in e["shapes"]:
            if s.get("ncu"):
                n = {k: v for k, v in s["ncu"].items() if k not in ("per_launch",)}
                out += ["## Nsight Compute metrics parsed into the result (rms_norm shape "
                        f"{s['id']}, {s['label']})", "", "```json", json.dumps(n, indent=1)[:3000], "```", ""]
    adv, cut = adversarial_outcomes(src)
    if adv:
        expected = _gpu_cases()
        lines = []
        for name, outcome, secs in adv:
            e = expected.get(name)
            kind, prob, verdict = (("honest" if e.honest else "cheat"), e.problem,
                                   f"{e.status}" + (f" ({e.cause})" if e.cause and not e.honest else "")) if e else ("?", "?", "?")
            lines.append(f"| {name} | {kind} | {prob} | {verdict} | {outcome} | {fmt(secs, '.1f')} |")
        out += table(f"Adversarial suite and honest kernels on {gpu} (`tests/test_adversarial.py -m gpu`)",
                     ["case", "kind", "problem", "expected verdict", "test outcome", "seconds"], lines,
                     intro="Each case's expected verdict (status, and text its reason must contain) is asserted by "
                           "the test; `pass` means the harness gave exactly that verdict." + (f" {cut}" if cut else ""))[:-1]
        out.append(f"\n{sum(1 for n in expected.values() if n.honest)} honest kernels, "
                   f"{sum(1 for n in expected.values() if not n.honest)} cheats.")
        out.append("")
    steps = src.parent / "steps.txt"
    if steps.exists():
        out += ["## Steps of the device call (rc 124/137: stopped at the call's deadline)", "", "```",
                *steps.read_text().splitlines(), "```", ""]
    log = next((p for p in (src / "pytest_gpu.log", src / "pytest_gpu_measure.log") if p.exists()), None)
    if log:
        tail = [l for l in log.read_text().splitlines() if any(w in l for w in ("passed", "failed", "XFAIL", "FAILED", "XPASS"))]
        out += ["## GPU test summary (`pytest -m gpu`)", "", "```", *tail[-20:], "```", ""]
    (dest / "MEASUREMENT.md").write_text("\n".join(out))
    print(f"wrote {dest / 'MEASUREMENT.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

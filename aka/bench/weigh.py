"""`aka bench weigh`: each operator's share of serving GPU time, two ways.

1. From a trace (`--trace trace.json`): a torch.profiler Chrome trace of a serving process. Every
   GPU kernel event is mapped to an operator by the first matching rule of
   `bench/kernel_rules.yaml` (op -> list of regexes over kernel names; edit it for your stack);
   time not matched is reported as `unmatched`, never silently dropped.
2. From a workload (`--workload bench/workloads/<name>.yaml`): a mix of (model, phase) shares of
   serving time and, per architecture, how many times each operator runs in one forward step.
   For each (model, phase), each operator's time is calls x the mean time of its benchmark shapes
   whose provenance names that model and phase (or, for an operator the model has no shapes of,
   those of the entry's `like` model). Times come from a benchmark run's records
   (`--times RUN_DIR`, the fastest correct implementation per shape) or, without one, from the
   roofline floor on the workload's GPU — an estimate, and the provenance says which.
   Operators no architecture of the mix runs (training kernels, variants the mix's models do not
   use) take a weight stated in the workload's `stated:` section with its reason; the derived
   weights share what is left, and stated operators need no times.

Either way the result is written with its provenance to bench/weights.json (or --out), which
`aka bench list/run` read. Re-weighting the suite for your own serving mix is one command.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

import yaml

from aka.bench.suite import Suite


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def weights_from_trace(trace_path: Path, rules_path: Path) -> tuple[dict[str, float], dict]:
    rules = yaml.safe_load(rules_path.read_text())
    compiled = [(op, re.compile(rx)) for op, rxs in rules.items() for rx in rxs]
    data = json.loads(trace_path.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    per_op: dict[str, float] = defaultdict(float)
    unmatched: dict[str, float] = defaultdict(float)
    for ev in events:
        if ev.get("ph") != "X" or ev.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        name, dur = ev.get("name", ""), float(ev.get("dur", 0.0))
        op = next((o for o, rx in compiled if rx.search(name)), None)
        if op is None:
            unmatched[name[:80]] += dur
        else:
            per_op[op] += dur
    total = sum(per_op.values()) + sum(unmatched.values())
    summary = {"gpu_time_us": dict(per_op), "unmatched_us": sum(unmatched.values()),
               "unmatched_top": dict(sorted(unmatched.items(), key=lambda kv: -kv[1])[:10]),
               "total_us": total}
    return _normalise(per_op), summary


def _shape_times(suite: Suite, times_dir: Path | None, gpu: str, stated: frozenset = frozenset()) -> tuple[dict, str]:
    """(op, shape) -> time in us: measured (fastest correct impl) or the roofline floor.
    Operators with a stated weight need no times."""
    if times_dir is not None:
        from aka.bench.run import load_records
        best: dict[tuple[str, str], float] = {}
        for r in load_records(times_dir):
            if r.get("correct") and r.get("time_us") and not r.get("impossible"):
                k = (r["op"], r["shape"])
                best[k] = min(best.get(k, float("inf")), r["time_us"])
        derived = [p.name for p in suite.problems if p.name not in stated]
        missing = sorted(set(derived) - {op for op, _ in best})
        if missing:
            # A partial run (a device call cut off by its deadline) would give every operator it
            # has not reached a weight of zero and rewrite the suite's weights with that.
            raise ValueError(f"{times_dir} has correct timings for {len(derived) - len(missing)} of "
                             f"{len(derived)} operators (none for: {', '.join(missing)}); weights from "
                             "it would give those zero weight. Finish the run (`aka bench run` resumes) first")
        return best, f"measured: fastest correct implementation per shape in {_rel(times_dir)}"
    from aka.hardware import match_spec
    from aka.roofline import Cost, roofline
    spec = match_spec(gpu)
    if spec is None:
        raise ValueError(f"workload gpu {gpu!r} is not in the spec table")
    out = {}
    for p in suite.problems:
        for s in p.shapes.values():
            cost = _cost_without_tensors(p, s)
            if cost is not None:
                out[(p.name, s.id)] = roofline(Cost(cost[0], cost[1], "meta"), spec.mem_tbps, spec.peak_tflops).sol_us
    return out, f"estimated: roofline floor on {spec.name} (datasheet), not measured"


def _cost_without_tensors(problem, shape):
    """FLOPs and bytes from the meta cost model; `bytes: auto` by building the inputs on the
    meta device (no memory, no compute)."""
    from aka.roofline import cost_env, eval_expr
    spec = problem.meta.get("cost") or {}
    kw = cost_env(spec, {**shape.init_kwargs, **shape.input_kwargs})
    try:
        flops = {k: eval_expr(v, kw) for k, v in (spec.get("flops") or {}).items()}
        if spec.get("bytes", "auto") != "auto":
            return flops, eval_expr(spec["bytes"], kw)
        return flops, _auto_bytes(problem, shape)
    except Exception:  # noqa: BLE001 - an op whose inputs cannot be built on meta is left out, and said
        return None


def _auto_bytes(problem, shape) -> float:
    import torch

    from aka.evaluate.loader import ProblemRuntime, call
    rt = ProblemRuntime(problem.worker_spec(), "meta")
    inputs = rt.make_inputs(shape.to_json())
    with torch.no_grad():
        out = call(rt.make_reference(shape.to_json()), inputs)
    from aka.roofline import tensor_bytes
    return float(tensor_bytes(list(inputs.values())) + tensor_bytes(out))


def weights_from_workload(suite: Suite, workload_path: Path, times_dir: Path | None) -> tuple[dict[str, float], dict]:
    wl = yaml.safe_load(workload_path.read_text())
    names = {p.name for p in suite.problems}
    for arch, calls in wl["architectures"].items():
        unknown = sorted(set(calls) - names)
        if unknown:
            raise ValueError(f"{workload_path}: architecture {arch} calls {', '.join(unknown)}, not operators of the "
                             "suite (leave operators the suite lacks out of the workload; say so in a comment)")
    for entry in wl["mix"]:
        if entry["arch"] not in wl["architectures"]:
            raise ValueError(f"{workload_path}: mix entry {entry['model']} {entry['phase']} names unknown "
                             f"architecture {entry['arch']!r}")
    stated = _stated(wl, names, workload_path)
    times, time_source = _shape_times(suite, times_dir, wl.get("gpu", "H200 SXM 141GB"), frozenset(stated))
    by_mp: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for p in suite.problems:
        for s in p.shapes.values():
            t = times.get((p.name, s.id))
            if t is not None:
                by_mp[(s.info.get("model"), s.info.get("phase"))][p.name].append(t)
    weights: dict[str, float] = defaultdict(float)
    detail = []
    for entry in wl["mix"]:
        model, phase, share = entry["model"], entry["phase"], float(entry["share"])
        calls = wl["architectures"][entry["arch"]]
        # `like: OTHER-MODEL`: an operator with no benchmark shape of this model takes OTHER's
        # shapes of the same phase (a model of similar size), and the summary says so.
        like = entry.get("like")
        op_t, proxied = {}, {}
        for op, n in calls.items():
            ts = by_mp[(model, phase)].get(op)
            if not ts and like and by_mp[(like, phase)].get(op):
                ts, proxied[op] = by_mp[(like, phase)][op], like
            if ts:
                op_t[op] = n * sum(ts) / len(ts)
        missing = sorted(op for op in calls if op not in op_t)
        total = sum(op_t.values())
        if total <= 0:
            detail.append({"model": model, "phase": phase, "share": share, "note": "no benchmark shape matches"})
            continue
        for op, t in op_t.items():
            weights[op] += share * t / total
        detail.append({"model": model, "phase": phase, "share": share, "step_us": total,
                       "op_us": op_t, "ops_without_shapes": missing}
                      | ({"shapes_of": proxied} if proxied else {}))
    rest = 1.0 - sum(w for w, _ in stated.values())
    out = {op: rest * w for op, w in _normalise(weights).items()} | {op: w for op, (w, _) in stated.items()}
    summary = {"times": time_source, "per_model_phase": detail}
    if stated:
        summary["stated"] = {op: {"weight": w, "why": why} for op, (w, why) in sorted(stated.items())}
    return dict(sorted(out.items())), summary


def _stated(wl: dict, names: set[str], workload_path: Path) -> dict[str, tuple[float, str]]:
    """The workload's `stated:` weights ({op: {weight, why}}), checked: suite operators that no
    architecture calls (one weight per operator), each with its reason, summing under 1."""
    raw = wl.get("stated") or {}
    called = {op for calls in wl["architectures"].values() for op in calls}
    out = {}
    for op, entry in raw.items():
        if op not in names:
            raise ValueError(f"{workload_path}: stated weight for {op}, not an operator of the suite")
        if op in called:
            raise ValueError(f"{workload_path}: {op} has a stated weight and is also called by an architecture")
        w, why = (entry or {}).get("weight"), (entry or {}).get("why")
        if not isinstance(w, (int, float)) or not 0 < w < 1 or not why:
            raise ValueError(f"{workload_path}: stated weight for {op} needs a weight in (0, 1) and a why")
        out[op] = (float(w), str(why))
    if sum(w for w, _ in out.values()) >= 1:
        raise ValueError(f"{workload_path}: stated weights sum to 1 or more")
    return out


def _normalise(d: dict[str, float]) -> dict[str, float]:
    total = sum(d.values())
    return {k: v / total for k, v in sorted(d.items())} if total > 0 else {}


def _rel(p: Path) -> str:
    from aka.problem import REPO_ROOT
    p = Path(p).resolve()
    return str(p.relative_to(REPO_ROOT)) if p.is_relative_to(REPO_ROOT) else str(p)


def write_weights(weights: dict[str, float], summary: dict, method: str, inputs: list[Path], out: Path,
                  suite: Suite, command: str = "aka bench weigh") -> Path:
    names = [p.name for p in suite.problems]
    full = {n: weights.get(n, 0.0) for n in names}
    payload = {
        "weights": full,
        "provenance": {"method": method, "inputs": {_rel(p): _sha(p) for p in inputs},
                       "date": _dt.date.today().isoformat(), "command": command,
                       "ops_with_zero_weight": sorted(n for n, w in full.items() if w == 0.0)},
        "summary": summary,
    }
    out.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n")
    return out

"""After the worker: per-shape roofline figures, and the human-readable table."""
from __future__ import annotations

from aka.evaluate.result import EvalResult
from aka.problem import Problem
from aka.util import fmt


def resolve_cost(meta: dict, shape, actual_bytes, counted_flops, cost_vars: dict | None = None):
    """The shape's Cost: Atrex per-shape figures, meta.json's model (its `vars` replaced by
    `cost_vars`, the values counted on the evaluated inputs, where given), or the counted bytes
    and FLOPs."""
    from aka.roofline import Cost, cost_from_meta
    spec = meta.get("cost") or {}
    if "per_shape" in spec and shape.id in spec["per_shape"]:  # Atrex-Bench roofline.json
        c = spec["per_shape"][shape.id]
        return Cost(flops=dict(c.get("flops", {})), bytes=float(c["bytes"]), source="atrex")
    if spec.get("bytes", "auto") == "auto" and actual_bytes is None:
        # The worker counts the real tensors' bytes on the first call; a candidate that failed
        # before it (static check, import, compile) leaves nothing to count: no roofline, no error.
        return None
    if spec.get("flops") is not None or spec.get("bytes") not in (None, "auto"):
        kw = {**shape.init_kwargs, **shape.input_kwargs, **(cost_vars or {})}
        return cost_from_meta(spec, kw, actual_bytes)
    if actual_bytes is None:
        return None
    return Cost(flops=dict(counted_flops or {}), bytes=float(actual_bytes), source="generic")


def attach_roofline(res: EvalResult, prob: Problem, selected) -> None:
    by_id = {s.id: s for s in selected}
    gpu = res.env.get("gpu")
    sheet = measured = None
    if gpu:
        from aka.hardware import ceilings_for
        try:
            sheet, measured = ceilings_for(gpu)
            res.env["ceilings"] = {"datasheet": vars(sheet), "measured": vars(measured) if measured else None}
        except ValueError as e:
            res.notes.append(f"no roofline: {e}")
    from aka.roofline import perf_metrics, roofline
    impossible = []
    for sr in res.shapes:
        shape = by_id.get(sr.id)
        if shape is None:
            continue
        try:
            cost = resolve_cost(prob.meta, shape, sr.bytes, sr.flops, sr.cost_vars)
        except ValueError as e:
            res.notes.append(f"shape {sr.id}: cost model error: {e}")
            continue
        if cost is None:
            continue
        sr.flops, sr.bytes = cost.flops, cost.bytes
        if sheet is None:
            continue
        rl = roofline(cost, sheet.mem_tbps, sheet.peak_tflops)
        sr.sol_us, sr.bound = rl.sol_us, rl.bound
        if measured is not None:
            sr.sol_us_measured = roofline(cost, measured.mem_tbps, measured.peak_tflops).sol_us
        if sr.time_us:
            m = perf_metrics(cost, sr.time_us, sheet.mem_tbps, sheet.peak_tflops)
            sr.iou, sr.mfu, sr.sol_fraction = m["iou"], m["mfu"], m["sol_fraction"]
            if measured is not None:
                sr.sol_fraction_measured = sr.sol_us_measured / sr.time_us
            if m["impossible"]:
                sr.impossible = True
                impossible.append(sr.id)
    if impossible and res.status == "pass":
        # A time under the datasheet floor is a measurement artefact or a cheat, never a win.
        res.status = "rejected"
        res.reason = (f"[timing] time below the roofline floor on shape(s) {', '.join(impossible)}: "
                      "impossible, not counted")


def ncu_line(n: dict) -> str:
    """One shape's profile in a line: DRAM and SM throughput, occupancy, DRAM bytes over the minimum,
    registers and spills, then the stall reasons when they were asked for (--ncu-stalls)."""
    from aka.evaluate.ncu import stall_line

    def pct(key):
        return f"{n[key]:.0f}%" if n.get(key) is not None else "-"
    parts = [f"DRAM {pct('dram_pct')}, SM {pct('sm_pct')}, occupancy {pct('occupancy_pct')}"]
    if n.get("bytes_over_min") is not None:
        parts.append(f"DRAM bytes {n['bytes_over_min']:.2f}x the minimum")
    if n.get("registers_per_thread") is not None:
        parts.append(f"{n['registers_per_thread']:.0f} registers, {n.get('spill_bytes') or 0:.0f} B spilled")
    stalls = stall_line(n)
    return "; ".join(parts + ([stalls] if stalls else []))


def render(res: EvalResult, console=None) -> None:
    from rich.console import Console
    from rich.table import Table
    console = console or Console()
    colour = {"pass": "green", "incorrect": "red", "fallback": "yellow"}.get(res.status, "magenta")
    console.print(f"[bold]{res.problem}[/] · {res.candidate} · device {res.device}: "
                  f"[bold {colour}]{res.status}[/] — {res.reason}")
    t = Table(show_lines=False)
    timed = any(s.time_us for s in res.shapes)
    peer = any(s.peer_us for s in res.shapes)
    cols = ["shape", "ok", "stage", "rel_err", "max_abs"]
    if timed:
        cols += ["time µs", "±", "eager µs", "compile µs", "×eager", "×compile"] + (["peer µs", "×peer"] if peer else [])
        cols += ["SOL µs", "SOL frac", "IOU", "MFU", "bound"]
    for c in cols:
        t.add_column(c, justify="right" if c not in ("shape", "stage", "bound") else "left")
    for s in res.shapes:
        row = [f"{s.id} {s.label}"[:40], fmt(s.correct), s.failed_stage or "", fmt(s.rel_err, ".2e"),
               fmt(s.max_abs_err, ".2e")]
        if timed:
            ci = (s.time_ci_us[1] - s.time_ci_us[0]) / 2 if s.time_ci_us else None
            row += [fmt(s.time_us, ".2f"), fmt(ci, ".2f"), fmt(s.eager_us, ".2f"), fmt(s.compile_us, ".2f"),
                    fmt(s.speedup_eager, ".2f"), fmt(s.speedup_compile, ".2f")]
            row += [fmt(s.peer_us, ".2f"), fmt(s.speedup_peer, ".2f")] if peer else []
            row += [fmt(s.sol_us, ".2f"),
                    fmt(s.sol_fraction, ".2f") + ("!" if s.impossible else ""), fmt(s.iou, ".2f"),
                    fmt(s.mfu, ".2f"), s.bound or ""]
        t.add_row(*row)
    console.print(t)
    for s in res.shapes:
        if s.reason and s.correct is False or s.fallback_ops:
            console.print(f"  shape {s.id}: {s.reason}")
    p = res.env.get("peer")
    if p:
        failed = [s for s in res.shapes if s.peer_status not in (None, "pass")]
        console.print(f"  peer: {p['name']} ({p['library']} {p['version']}): {p.get('what', '')}"
                      + (f"; not used on {len(failed)} shape(s): {failed[0].peer_status}: {failed[0].peer_reason}"
                         if failed else ""))
    for s in res.shapes:
        if s.compile and s.compile.get("available"):
            from aka.evaluate.compile_report import summary_lines
            console.print(f"  shape {s.id}, offline sm_{s.compile.get('capability', 90)}a compile (no GPU run):",
                          markup=False)
            for line in summary_lines(s.compile):
                console.print(f"    {line}", markup=False)
    for s in res.shapes:
        if s.ncu and s.ncu.get("available") and not s.ncu.get("error"):
            console.print(f"  shape {s.id}, Nsight Compute: {ncu_line(s.ncu)}", markup=False)
    for n in res.notes:
        console.print(f"  [dim]note: {n}[/]")
    if res.wall_s:
        console.print("  [dim]wall: " + ", ".join(f"{k}={v}" for k, v in res.wall_s.items()) + "[/]")

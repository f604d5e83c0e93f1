"""`aka bench report`: a markdown summary and two plots from a run's records."""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from aka.bench.run import load_records
from aka.bench.score import FAST_P, by_impl
from aka.roofline import LARGE_SOL_US
from aka.util import fmt


def _w(v):
    """A weight: three decimals, or two significant digits when that would print a non-zero as 0."""
    return "-" if v is None else (format(v, ".3f") if v == 0 or v >= 0.0005 else format(v, ".1e"))


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


def write_report(run_dir: Path, weights: Path | None = None, say=_stderr) -> Path:
    """REPORT.md and plots for a run. `weights`: a weights file (`aka bench weigh`) whose operator
    weights replace those the records were written with (a run outlives a re-weighting). A plot
    that cannot be drawn is said, through `say` and in REPORT.md, never skipped in silence."""
    rows = load_records(run_dir)
    if not rows:
        raise FileNotFoundError(f"no records in {run_dir}")
    meta = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    if weights is not None:
        data = json.loads(Path(weights).read_text())
        w = data["weights"]
        missing = sorted({r["op"] for r in rows} - set(w))
        if missing:
            raise ValueError(f"{weights} has no weight for {', '.join(missing)}")
        rows = [dict(r, op_weight=w[r["op"]]) for r in rows]
        meta = dict(meta, weights_source=f"{weights}: {data.get('provenance', {}).get('method', '?')} "
                                         f"(applied by `aka bench report --weights`; the run recorded "
                                         f"{meta.get('weights_source', '?')})")
    scores = by_impl(rows)
    impls = sorted(scores)
    env = next((r for r in rows if r.get("gpu")), rows[0])
    lines = [f"# Benchmark run: {run_dir.name}", "",
             f"GPU {env.get('gpu') or 'none (CPU interpreter)'}, torch {env.get('torch')}, triton {env.get('triton')}, "
             f"git {_shas(rows)}, {env.get('date')}. Weights: {meta.get('weights_source', '?')}.",
             f"Shapes: {meta.get('shapes', '?')}. Records: `{run_dir.name}/records.jsonl`. Produced by "
             f"`aka bench run` then `aka bench report`.", _wall_line(meta), "",
             "## Aggregate", "", "| impl | score (Σ w·geomean SOL) | pass | fallback | "
             + " | ".join(f"fast_{p:g} eager" for p in FAST_P) + " | "
             + " | ".join(f"fast_{p:g} compile" for p in FAST_P) + " |",
             "|---|---|---|---|" + "---|" * (2 * len(FAST_P))]
    for impl in impls:
        s = scores[impl]
        lines.append(f"| {impl} | {s['score']:.4f} | {s['pass_rate']:.2f} | {s['fallback_rate']:.2f} | "
                     + " | ".join(f"{s[f'fast_{p:g}_eager']:.2f}" for p in FAST_P) + " | "
                     + " | ".join(f"{s[f'fast_{p:g}_compile']:.2f}" for p in FAST_P) + " |")
    ops = sorted({r["op"] for r in rows})
    large = _large_geomeans(rows)
    lines += ["", "## Per operator (geomean SOL fraction over shapes; 0 when a shape failed or was untimed)", "",
              f"Large shapes: roofline time >= {LARGE_SOL_US:.0f} us, where the ceiling rather than launch latency "
              "limits (a decode shape moving a few KB has a roofline of nanoseconds, which no launch reaches); "
              "their geomean is over the timed ones.", "",
              "| op | category | weight | shapes | " + " | ".join(impls) + " | large shapes | "
              + " | ".join(f"{i} (large)" for i in impls) + " |",
              "|---|---|---|---|" + "---|" * (2 * len(impls) + 1)]
    for op in ops:
        first = scores[impls[0]]["per_op"].get(op, {})
        cells = []
        for impl in impls:
            o = scores[impl]["per_op"].get(op)
            cells.append("-" if o is None else (f"{o['score']:.3f}" if not o["why"] else f"0 ({o['why']})"))
        n_large = max((large.get((op, i), (0, None))[0] for i in impls), default=0)
        big = [fmt(large.get((op, i), (0, None))[1], ".3f") for i in impls]
        lines.append(f"| {op} | {first.get('category')} | {_w(first.get('weight'))} | {first.get('shapes')} | "
                     + " | ".join(cells) + f" | {n_large} | " + " | ".join(big) + " |")
    from aka.bench.peers import markdown as peer_markdown
    from aka.bench.peers import peer_rows
    against = peer_rows(rows)
    if against:
        lines += ["", "## Against production peers (meta.json `peer`)", "", peer_markdown(against).rstrip("\n")]
    plots, why = _plots(rows, run_dir, impls, ops)
    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    if why:
        lines.append(f"Plots not drawn: {why}.")
        say(f"aka bench report: plots not drawn: {why}")
    elif not any(p.name == "roofline.png" for p in plots):
        lines.append("No roofline plot: no record has both a time and a FLOP count (a CPU run times nothing).")
    out = run_dir / "REPORT.md"
    out.write_text("\n".join(lines) + "\n")
    return out


def _large_geomeans(rows) -> dict:
    """(op, impl) -> (large shapes, geomean sol_fraction over those of them that were timed)."""
    from aka.evaluate.stats import geomean
    by: dict = {}
    for r in rows:
        if (r.get("sol_us") or 0) >= LARGE_SOL_US:
            by.setdefault((r["op"], r["impl"]), []).append(r.get("sol_fraction") if r.get("correct") else None)
    return {k: (len(v), geomean([x for x in v if x]) if any(v) else None) for k, v in by.items()}


def _shas(rows) -> str:
    """The commit(s) the records were measured at; a resumed run can span several."""
    n = Counter(str(r.get("git_sha")) for r in rows)
    return next(iter(n)) if len(n) == 1 else " + ".join(f"{sha} ({k} records)" for sha, k in n.items())


def _wall_line(meta: dict) -> str:
    segs = [s for s in meta.get("segments", []) if s.get("wall_s") is not None]
    if not segs:
        return "Wall time: not recorded (the run was interrupted, or predates the record)."
    def part(s: dict) -> str:
        head = f"{s['wall_s']:.0f} s (--jobs {s.get('jobs')}" + (f", git {s['git_sha']}" if s.get("git_sha") else "")
        if "records_after" in s:
            return f"{head}, {s['records_after'] - s.get('records_before', 0)} records)"
        # cut off (a deadline, a kill): its wall time as last written (every op, every 15 s)
        return f"{head}, {s.get('ops_finished', 0)} ops finished, then cut off)"
    parts = ", ".join(part(s) for s in segs)
    return f"Wall time: {sum(s['wall_s'] for s in segs):.0f} s in {len(segs)} invocation(s): {parts}."


def _roof(rows):
    gpu = next((r.get("gpu") for r in rows if r.get("gpu")), None)
    if not gpu:
        return None
    from aka.hardware import match_spec
    spec = match_spec(gpu)
    return (spec.mem_tbps, spec.peak_tflops.get("bf16")) if spec else None


def _plots(rows, run_dir: Path, impls, ops) -> tuple[list[Path], str | None]:
    """(the plots drawn, why the others were not)."""
    from aka.plots import failed, pyplot
    plt, why = pyplot()
    if plt is None:
        return [], why
    out: list[Path] = []
    try:
        _draw(plt, rows, run_dir, impls, ops, out)
    except Exception as e:  # noqa: BLE001 - a broken font cache or a full disk: said, and the tables stand
        plt.close("all")
        return out, failed("a plot", e)
    return out, None


def _draw(plt, rows, run_dir: Path, impls, ops, out: list[Path]) -> None:
    scores = by_impl(rows)
    fig, ax = plt.subplots(figsize=(max(8, len(ops) * 0.45), 4.5))
    width = 0.8 / max(1, len(impls))
    for i, impl in enumerate(impls):
        vals = [scores[impl]["per_op"].get(op, {}).get("score", 0.0) for op in ops]
        ax.bar([x + i * width for x in range(len(ops))], vals, width, label=impl)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(ops))], ops, rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("geomean SOL fraction")
    ax.legend()
    fig.tight_layout()
    p = run_dir / "sol_fraction_by_op.png"
    fig.savefig(p, dpi=120)
    plt.close(fig)
    out.append(p)
    pts = [r for r in rows if r.get("time_us") and r.get("bytes") and sum((r.get("flops") or {}).values()) > 0]
    if pts:
        fig, ax = plt.subplots(figsize=(7, 5))
        for impl in impls:
            rs = [r for r in pts if r["impl"] == impl]
            ai = [sum(r["flops"].values()) / r["bytes"] for r in rs]
            tflops = [sum(r["flops"].values()) / (r["time_us"] * 1e6) for r in rs]
            ax.scatter(ai, tflops, s=10, label=impl, alpha=0.7)
        roof = _roof(rows)
        if roof:
            bw, peak = roof
            xs = [10 ** (k / 10) for k in range(-20, 50)]
            ax.plot(xs, [min(peak, x * bw) for x in xs], "k--", lw=1, label=f"roof ({bw} TB/s, {peak:g} TFLOP/s bf16)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP / byte, minimum bytes)")
        ax.set_ylabel("achieved TFLOP/s")
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = run_dir / "roofline.png"
        fig.savefig(p, dpi=120)
        plt.close(fig)
        out.append(p)

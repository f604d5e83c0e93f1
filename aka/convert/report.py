"""`aka convert report LIBRARY`: coverage, converted time share and the estimated serving-time saving.

Per operator, over the shapes its kernel was verified on:
  speedup vs eager   = sum(eager_us) / sum(time_us)   (the fallback *is* the eager reference; the
                        ratio of summed times is the one that scales the operator's share of time,
                        where a geomean of per-shape ratios would not)
  speedup vs compile = sum(compile_us) / sum(time_us), where every shape has a torch.compile time
An operator is *converted* when its kernel passes every shape and beats eager and, where a compile
time exists, torch.compile. Converted time share = sum of their shares; the estimated saving is
sum(share x (1 - 1/speedup vs eager)) over them: the fraction of the profiled (or weighted) time
the library would remove if each converted operator kept its share and nothing else changed.
Kernels verified without a GPU (the interpreter) have no times: they count as correctness-only
coverage, never as converted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from aka.convert.library import Library, now

COLORS = {"converted": "#2e7d32", "slower": "#ef6c00", "correct_only": "#1565c0", "no_kernel": "#9e9e9e",
          "failed": "#c62828", "not_attempted": "#e0e0e0"}
LABELS = {"converted": "converted", "slower": "passes, not faster than eager and compile",
          "correct_only": "correct only (no GPU)", "no_kernel": "no kernel", "failed": "failed",
          "not_attempted": "not attempted"}


@dataclass
class OpRow:
    name: str
    share: float | None
    state: str                  # pass | no_kernel | failed | not_attempted
    verdict: str                # converted | slower | correct_only | no_kernel | failed | not_attempted
    shapes: int = 0
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    sol_fraction: float | None = None
    gpu: str | None = None
    device: str | None = None
    model: str | None = None
    cost_usd: float | None = None
    wall_s: float | None = None
    why: str = ""


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(float(x)) and x > 0 else None


def speedups(result: dict) -> tuple[float | None, float | None, float | None]:
    """(vs eager, vs compile, geomean sol_fraction) from an EvalResult's shapes; None when untimed."""
    shapes = result.get("shapes") or []
    t = [_num(s.get("time_us")) for s in shapes]
    if not shapes or any(v is None for v in t):
        return None, None, None
    total = sum(t)
    eager = [_num(s.get("eager_us")) for s in shapes]
    comp = [_num(s.get("compile_us")) for s in shapes]
    se = sum(eager) / total if all(v is not None for v in eager) else None
    sc = sum(comp) / total if all(v is not None for v in comp) else None
    sol = [_num(s.get("sol_fraction")) for s in shapes]
    sf = math.exp(sum(math.log(v) for v in sol) / len(sol)) if all(v is not None for v in sol) else None
    return se, sc, sf


def classify(state: str, se: float | None, sc: float | None) -> str:
    if state != "pass":
        return state
    if se is None:
        return "correct_only"
    return "converted" if se > 1.0 and (sc is None or sc > 1.0) else "slower"


def rows(lib: Library) -> list[OpRow]:
    entries = {e.name: e for e in lib.entries()}
    shares = {f["name"]: f.get("share") for f in lib.fallbacks()}
    names = list(shares) + [n for n in entries if n not in shares]
    out = []
    for n in names:
        e = entries.get(n)
        share = shares.get(n) if n in shares else (e.status.get("share") if e else None)
        if e is None:
            out.append(OpRow(n, share, "not_attempted", "not_attempted"))
            continue
        se = sc = sf = None
        if e.state == "pass" and e.result:
            se, sc, sf = speedups(e.result)
        p = e.provenance
        out.append(OpRow(n, share, e.state, classify(e.state, se, sc), len((e.result or {}).get("shapes") or []),
                         se, sc, sf, p.get("gpu"), p.get("device"), p.get("model"), p.get("cost_usd"),
                         p.get("job_wall_s"), (e.status.get("why") or "").splitlines()[0][:120]))
    out.sort(key=lambda r: -(r.share or 0.0))
    return out


def totals(rs: list[OpRow]) -> dict:
    conv = [r for r in rs if r.verdict == "converted"]
    return {
        "fallbacks": len(rs), "attempted": sum(r.state != "not_attempted" for r in rs),
        "passing": sum(r.state == "pass" for r in rs), "converted": len(conv),
        "correct_only": sum(r.verdict == "correct_only" for r in rs), "slower": sum(r.verdict == "slower" for r in rs),
        "no_kernel": sum(r.verdict == "no_kernel" for r in rs), "failed": sum(r.verdict == "failed" for r in rs),
        "share_converted": sum(r.share or 0.0 for r in conv),
        "share_passing": sum(r.share or 0.0 for r in rs if r.state == "pass"),
        "saving": sum((r.share or 0.0) * (1.0 - 1.0 / r.speedup_eager) for r in conv),
        "timed": sum(r.speedup_eager is not None for r in rs),
        "cost_usd": sum(r.cost_usd or 0.0 for r in rs),
    }


def _f(x, fmt="{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def chart(rs: list[OpRow], path: Path, top: int = 30) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    show = rs[:top][::-1]
    timed = [r for r in show if r.speedup_eager is not None]
    fig, axes = plt.subplots(1, 2 if timed else 1, figsize=(12 if timed else 7, 0.32 * len(show) + 1.6),
                             squeeze=False, sharey=True)
    ax = axes[0][0]
    ax.barh([r.name for r in show], [100 * (r.share or 0.0) for r in show],
            color=[COLORS[r.verdict] for r in show])
    top_share = max([100 * (r.share or 0.0) for r in show] + [1e-9])
    for i, r in enumerate(show):  # small shares are invisible bars: say the number and the outcome
        ax.text(100 * (r.share or 0.0) + 0.01 * top_share, i, f"{100 * (r.share or 0.0):.2f}% {LABELS[r.verdict]}",
                va="center", fontsize=7)
    ax.set_xlim(0, top_share * 1.35)
    ax.set_xlabel("share of fallback time (%)" + ("" if timed else "; no GPU timings: correctness only"))
    ax.set_title("fallbacks by time share, coloured by outcome", fontsize=10)
    present = [v for v in COLORS if any(r.verdict == v for r in show)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[v]) for v in present]
    fig.legend(handles, [LABELS[v] for v in present], fontsize=8, loc="lower center",
               ncol=len(present), frameon=False)
    if timed:
        ax2 = axes[0][1]
        ax2.barh([r.name for r in show], [r.speedup_eager or 0.0 for r in show],
                 color=[COLORS[r.verdict] for r in show])
        ax2.axvline(1.0, color="k", lw=0.8)
        ax2.set_xscale("log")
        from matplotlib.ticker import FuncFormatter
        for axis in (ax2.xaxis.set_major_formatter, ax2.xaxis.set_minor_formatter):
            axis(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax2.set_xlabel("speedup over eager (sum of times over shapes)")
        ax2.set_title("kernel vs the PyTorch fallback", fontsize=10)
    fig.tight_layout(rect=(0, 0.06 + 0.3 / max(1, len(show)), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(library: Path, out: Path | None = None) -> tuple[Path, Path | None]:
    lib = Library(library)
    out = Path(out or library)
    out.mkdir(parents=True, exist_ok=True)
    rs = rows(lib)
    t = totals(rs)
    png = chart(rs, out / "coverage.png")
    entries = lib.entries()
    gpus = sorted({e.provenance.get("gpu") or f"none ({e.provenance.get('device')})" for e in entries})
    vers = sorted({f"torch {e.provenance.get('torch')}, triton {e.provenance.get('triton')}" for e in entries
                   if e.provenance.get("torch")})
    shas = sorted({str(e.provenance.get("git_sha")) for e in entries if e.provenance.get("git_sha")})
    models = sorted({str(e.provenance.get("model")) for e in entries if e.provenance.get("model")})
    src = (lib.root / "fallbacks.json")
    lines = [f"# Kernel library report: {lib.root}", "",
             f"Written {now()} by `aka convert report` from the library's status, result and provenance files.",
             f"GPU: {', '.join(gpus) or '-'}; {'; '.join(vers) or 'versions unknown'}; git {', '.join(shas) or '-'}; "
             f"proposer/model: {', '.join(models) or '-'}; LLM cost ${t['cost_usd']:.2f}.",
             f"Fallbacks and shares: {'fallbacks.json' if src.exists() else 'none recorded (shares unknown)'}.", ""]
    if t["timed"] == 0:
        lines += ["**No kernel in this library was timed.** Every result here comes from runs without a GPU "
                  "(the Triton interpreter): correctness only. Speedups, and so converted coverage, the converted "
                  "time share and the serving-time saving, need a GPU run (`aka convert ... device=cuda`); until "
                  "then passing kernels are counted separately as correctness-only coverage.", ""]
    lines += ["| | |", "|---|---|",
              f"| fallbacks | {t['fallbacks']} (attempted {t['attempted']}) |",
              f"| passing kernels (correct on every verified shape) | {t['passing']} "
              f"({100 * t['share_passing']:.1f}% of the time) |",
              f"| converted: passing and faster than eager and torch.compile | {t['converted']} |",
              f"| correctness only (no GPU timings) | {t['correct_only']} |",
              f"| passing but not faster | {t['slower']} |",
              f"| no kernel found / failed | {t['no_kernel']} / {t['failed']} |",
              f"| time share converted | {100 * t['share_converted']:.1f}% |",
              f"| estimated serving-time saving, sum share x (1 - 1/speedup) | {100 * t['saving']:.1f}% |", ""]
    if png:
        lines += [f"![coverage]({png.name})", ""]
    lines += ["| # | operator | share | outcome | shapes | vs eager | vs compile | SOL frac | device | model | "
              "wall s | note |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rs, 1):
        lines.append(f"| {i} | {r.name} | {_f(None if r.share is None else 100 * r.share, '{:.2f}%')} | "
                     f"{LABELS[r.verdict]} | {r.shapes or '-'} | {_f(r.speedup_eager, '{:.2f}x')} | "
                     f"{_f(r.speedup_compile, '{:.2f}x')} | {_f(r.sol_fraction, '{:.3f}')} | "
                     f"{r.gpu or r.device or '-'} | {r.model or '-'} | {_f(r.wall_s, '{:.0f}')} | "
                     f"{r.why.replace('|', '/')} |")
    lines += ["", "Speedups are sum(eager_us)/sum(time_us) over the verified shapes (vs compile likewise); "
              "see aka/convert/report.py for why the sum and what `converted` requires."]
    md = out / "REPORT.md"
    md.write_text("\n".join(lines) + "\n")
    return md, png

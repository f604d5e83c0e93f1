"""How much of each external suite aka loads, and whether its references run on CPU at the sizes
aka gives them. Writes a markdown table (default results/external_suites.md).

    python scripts/survey_suites.py --atrex ATREX/data --kbx KernelBenchX --kernelbench KernelBench/KernelBench

For every suite: what `aka bench list --suite` loads (operators, shapes, the ones that fail to
load). Then per shape, on CPU: make the inputs and run the reference once through the worker's
own loader (aka/evaluate/loader.py), in this process, as tests/test_bench.py does for ours: this
runs the suites' reference and input code, so point it only at checkouts you would evaluate.
Atrex-Bench shapes are GPU-sized (up to GBs), so for Atrex only loading is surveyed. KernelBench
files run their small shape (`--shapes small`), KernelBench-X tasks every shape.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from aka.bench.suite import load_suite  # noqa: E402
from aka.evaluate.compare import flatten_outputs  # noqa: E402
from aka.evaluate.loader import ProblemRuntime, call  # noqa: E402
from aka.problem import ProblemError, load_problem  # noqa: E402


def _commit(path: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _run_shape(rt: ProblemRuntime, shape) -> tuple[bool, str, int]:
    """(ran, error, largest input in bytes) for one shape's inputs and one reference call."""
    try:
        torch.manual_seed(0)
        inputs = rt.make_inputs(shape.to_json())
        model = rt.make_reference(shape.to_json())
        with torch.no_grad():
            flatten_outputs(call(model, inputs))
        big = max((v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor)), default=0)
        return True, "", big
    except Exception as e:  # noqa: BLE001 - a reference that cannot run is what this survey counts
        return False, f"{type(e).__name__}: {str(e).splitlines()[0][:90] if str(e) else ''}", 0


def survey_loaded(name: str, path: Path) -> list[str]:
    suite = load_suite(path)
    lines = [f"| {name} | {path.name} @ {_commit(path)} | {len(suite.problems)} | "
             f"{sum(len(p.shapes) for p in suite.problems)} | {len(suite.failed)} | "
             f"{sum(1 for p in suite.problems if p.category)} |"]
    return lines + [f"|  | failed to load: `{n}` | {why[:140]} | | | |" for n, why in suite.failed]


def survey_runs(name: str, problems, small: bool, progress) -> list[str]:
    ok = bad = 0
    errors: collections.Counter = collections.Counter()
    big, where = 0, ""
    for p in problems:
        try:
            shapes = p.select("small") if small else list(p.shapes.values())
            rt = ProblemRuntime(p.worker_spec(), "cpu")
        except Exception as e:  # noqa: BLE001 - a problem that cannot start is counted, per shape
            bad += len(p.shapes) if not small else 1
            errors[f"{p.name}: {type(e).__name__}: {str(e)[:80]}"] += 1
            continue
        for s in shapes:
            ran, why, nbytes = _run_shape(rt, s)
            ok, bad = ok + ran, bad + (not ran)
            if not ran:
                errors[f"{p.name}: {why}"] += 1
            elif nbytes > big:
                big, where = nbytes, f"{p.name} shape {s.id}"
        progress(f"{name}: {p.name}")
    out = [f"| {name} | {ok} | {bad} | {big / 2**20:.1f} MiB ({where}) |"]
    return out, errors


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--atrex", type=Path, help="Atrex-Bench data/ folder")
    ap.add_argument("--kbx", type=Path, help="KernelBench-X checkout (or its data/kernelbenchx)")
    ap.add_argument("--kernelbench", type=Path, help="KernelBench's KernelBench/ folder (level1, level2, ...)")
    ap.add_argument("--levels", default="level1,level2,level3")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "external_suites.md")
    args = ap.parse_args(argv)
    t0 = time.time()

    def progress(msg: str) -> None:
        print(f"[{time.time() - t0:6.0f}s] {msg}", file=sys.stderr, flush=True)

    loaded = ["| suite | source | operators | shapes | failed to load | categorised |", "|---|---|---|---|---|---|"]
    runs = ["| suite | shapes whose inputs and reference ran on CPU | failed | largest input |", "|---|---|---|---|"]
    errors: collections.Counter = collections.Counter()
    if args.atrex:
        loaded += survey_loaded("Atrex-Bench", args.atrex)
    if args.kbx:
        loaded += survey_loaded("KernelBench-X", args.kbx)
        rows, errs = survey_runs("KernelBench-X (every shape)", load_suite(args.kbx).problems, False, progress)
        runs += rows
        errors.update(errs)
    if args.kernelbench:
        for level in args.levels.split(","):
            files = sorted((args.kernelbench / level).glob("*.py"))
            problems = [load_problem(f) for f in files]
            with_small = [p for p in problems if p.small_shapes]
            scaled = sum(1 for p in with_small if "s0" in p.small_shapes)
            loaded.append(f"| KernelBench {level} | {args.kernelbench.name} @ {_commit(args.kernelbench)} | "
                          f"{len(problems)} | small shape: {len(with_small)} ({scaled} scaled, "
                          f"{len(with_small) - scaled} already small), none: {len(problems) - len(with_small)} | | |")
            for p in problems:
                if not p.small_shapes:
                    errors[f"{level}/{p.name}: no small shape: {p.meta['no_small_shape'][:90]}"] += 1
            rows, errs = survey_runs(f"KernelBench {level} (small shape)", with_small, True, progress)
            runs += rows
            errors.update(errs)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    text = [f"# External suites in aka ({datetime.date.today()}, {platform.machine()}, torch {torch.__version__}, "
            f"CPU; written by `python scripts/survey_suites.py`)", "",
            "What `aka bench list --suite` loads:", "", *loaded, "",
            "Inputs made and the reference run once per shape, on CPU, through the worker's loader:", "",
            *runs, "", f"Peak resident memory {peak:.1f} GiB; {time.time() - t0:.0f} s.", "",
            "Failures and missing small shapes:", ""]
    text += [f"- {k}" + (f" (x{n})" if n > 1 else "") for k, n in sorted(errors.items())]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

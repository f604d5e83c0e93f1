"""`aka convert`: rank a suite's, a model's or a trace's PyTorch fallbacks, then convert them in a batch.

    aka convert bench library=lib                                # the bundled benchmark, offline proposer
    aka convert path/to/suite library=lib executor=ray address=auto model=anthropic:<model>
    aka convert model:examples.llama_block:factory library=lib gpus=0,1 jobs-per-gpu=2
    aka convert trace.json library=lib                           # a torch.profiler trace
    aka convert report lib                                       # coverage, time share, saving -> REPORT.md
    aka convert apply examples.llama_block:factory --library lib # patch a model with the library's kernels
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_LIBRARY = "kernel_library"


def add_parser(sub) -> None:
    c = sub.add_parser("convert", help="turn a suite's, model's or trace's PyTorch fallbacks into kernels (batch)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("source", help="bench | a suite or operator directory | model:module:factory | trace .json "
                                  "| report | apply")
    c.add_argument("rest", nargs=argparse.REMAINDER, help="options (see `aka convert SOURCE --help`)")
    c.set_defaults(func=cmd_convert)


def cmd_convert(args) -> int:
    if args.source == "report":
        return cmd_report(args.rest)
    if args.source == "apply":
        return cmd_apply(args.rest)
    return cmd_run(args.source, args.rest)


def run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aka convert SOURCE", description="Options of a conversion batch; "
                                "section.key=value words go to every operator's optimize run.")
    p.add_argument("--library", default=DEFAULT_LIBRARY, help=f"kernel library directory (default {DEFAULT_LIBRARY}/)")
    p.add_argument("--executor", default="local", choices=["local", "ray"])
    p.add_argument("--address", default=None, help="Ray cluster address (auto, ray://host:10001, ...)")
    p.add_argument("--gpus", default=None, help="local: GPU ids, e.g. 0,1 (default: all visible; 'none': CPU)")
    p.add_argument("--jobs-per-gpu", type=int, default=1, help="local: jobs sharing one GPU (timing takes the GPU lock)")
    p.add_argument("--workers", type=int, default=1, help="local, without GPUs: jobs at once on the CPU")
    p.add_argument("--gpus-per-job", type=float, default=1.0, help="ray: num_gpus of each task (0 on CPU)")
    p.add_argument("--retries", type=int, default=1, help="ray: resubmissions after a dead worker or node")
    p.add_argument("--model", default="offline", help="offline | scripted:<file.json> | anthropic:<model> | ...")
    p.add_argument("--iters", type=int, default=None, help="optimize rounds per operator")
    p.add_argument("--shape", default="all", help="shapes per operator (all, small, first, last, ids)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when visible)")
    p.add_argument("--config", action="append", default=[], help="optimize YAML config (repeatable)")
    p.add_argument("--ops", default=None, help="only these operators (comma list)")
    p.add_argument("--top", type=int, default=None, help="only the N largest fallbacks by time share")
    p.add_argument("--min-share", type=float, default=0.0, help="skip fallbacks under this share of the time")
    p.add_argument("--timeout", type=float, default=None, help="seconds per operator (its job is killed after)")
    p.add_argument("--extract-dir", default=None, help="model/trace: where operator directories go "
                                                       "(default LIBRARY/problems)")
    p.add_argument("--force", action="store_true", help="convert again what the library has done")
    p.add_argument("--dry-run", action="store_true", help="print the fallback table and stop")
    return p


@dataclass
class Fallback:
    name: str
    share: float
    problem: str | None        # operator directory (None: could not be extracted)
    source: str
    op_kind: str = ""
    shapes: int = 0
    note: str = ""

    def row(self) -> dict:
        return dict(self.__dict__)


def _split_overrides(rest: list[str]) -> tuple[list[str], dict]:
    """`section.key=value` words (not a flag's value) -> optimize overrides; the rest are flags."""
    flags, over, after_flag = [], {}, False
    for a in rest:
        if not after_flag and not a.startswith("-") and "=" in a and "." in a.split("=", 1)[0]:
            k, v = a.split("=", 1)
            over[k] = v
        else:
            flags.append(a)
        after_flag = a.startswith("--") and "=" not in a
    return flags, over


def suite_fallbacks(source: str) -> tuple[list[Fallback], str]:
    from aka.bench.suite import load_suite
    from aka.problem import ProblemError, load_problem
    path = Path(source)
    if source != "bench" and path.is_dir() and (path / "reference.py").exists():
        prob = load_problem(path)
        return [Fallback(prob.name, 1.0, str(prob.root), f"op:{path}", prob.category or "", len(prob.shapes))], \
            "one operator: the whole share"
    try:
        suite = load_suite(None if source == "bench" else source)
    except ProblemError:
        raise
    rows = [Fallback(p.name, suite.weight(p.name), str(p.root), f"suite:{suite.root}", p.category or "",
                     len(p.shapes)) for p in suite.problems]
    return rows, f"suite weights: {suite.weights_source}"


def model_fallbacks(source: str, extract_dir: Path, device: str | None) -> tuple[list[Fallback], str]:
    from aka.errors import UserError
    try:
        from aka.convert.extract import extract
        from aka.convert.fallbacks import find_model_fallbacks, find_trace_fallbacks
    except ImportError as e:
        raise UserError(f"model and trace sources need aka/convert/fallbacks.py and extract.py "
                        f"(the convert-model half), which this install lacks: {e}") from None
    if source.startswith("model:"):
        from aka.evaluate.api import resolve_device
        factory = source[len("model:"):]
        groups = find_model_fallbacks(factory, resolve_device(device))
        groups = extract(groups, extract_dir, factory)
        basis = "profiled time of the model's forward (torch.profiler)"
    else:
        groups = find_trace_fallbacks(source)
        groups = extract(groups, extract_dir, None)
        basis = f"time in the trace {source}"
    rows = [Fallback(g.name, g.share, g.problem_dir, g.source, g.op_kind, len(g.shapes),
                     getattr(g, "error", None) or ("" if g.problem_dir else "not extracted")) for g in groups]
    return rows, basis


def print_table(rows: list[Fallback], basis: str, lib, console) -> None:
    from rich.table import Table
    t = Table(title=f"fallbacks by time share ({basis})", title_justify="left")
    for col in ("#", "operator", "kind", "share", "cumulative", "shapes", "library"):
        t.add_column(col, justify="right" if col in ("#", "share", "cumulative", "shapes") else "left")
    cum = 0.0
    for i, r in enumerate(rows, 1):
        cum += r.share
        st = lib.status(r.name)
        state = st["state"] if st else ("-" if r.problem else "not extracted")
        t.add_row(str(i), r.name, r.op_kind, f"{100 * r.share:.2f}%", f"{100 * cum:.1f}%", str(r.shapes), state)
    console.print(t)
    why: dict[str, list[str]] = {}
    for r in rows:
        if not r.problem:
            why.setdefault(r.note or "no operator directory", []).append(r.name)
    for note, names in why.items():
        console.print(f"not extracted ({len(names)}): {note}: {', '.join(names)}")


def cmd_run(source: str, rest: list[str]) -> int:
    from rich.console import Console

    from aka.errors import UserError
    from aka.convert.batch import ConvertOptions, run_batch
    from aka.convert.library import Library
    from aka.executors import make_executor
    from aka.problem import ProblemError

    flags, overrides = _split_overrides(rest)
    args = run_parser().parse_args(flags)
    # Off a terminal rich assumes 80 columns and would cut operator names in the table.
    console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    lib = Library(args.library)
    src_path = Path(source)
    try:
        if source.startswith("model:") or (src_path.is_file() and src_path.suffix in (".json", ".gz")):
            rows, basis = model_fallbacks(source, Path(args.extract_dir or lib.root / "problems"), args.device)
        elif source == "bench" or src_path.is_dir():
            rows, basis = suite_fallbacks(source)
        else:
            raise UserError(f"unknown source {source!r}: bench, a suite or operator directory, "
                            "model:module:factory, or a torch.profiler trace .json")
    except ProblemError as e:
        raise UserError(str(e)) from None
    rows.sort(key=lambda r: -r.share)
    lib.root.mkdir(parents=True, exist_ok=True)
    lib.write_fallbacks([r.row() for r in rows], source)
    print_table(rows, basis, lib, console)

    chosen = [r for r in rows if r.problem and r.share >= args.min_share]
    if args.ops:
        want = [o.strip() for o in args.ops.split(",") if o.strip()]
        unknown = set(want) - {r.name for r in rows}
        if unknown:
            raise UserError(f"unknown operator(s): {', '.join(sorted(unknown))}")
        chosen = [r for r in chosen if r.name in want]
    if args.top is not None:
        chosen = chosen[:args.top]
    if args.dry_run:
        console.print(f"dry run: {len(chosen)} operator(s) would be converted")
        return 0
    if not chosen:
        console.print("nothing to convert")
        return 0
    cpu = args.device == "cpu" or args.gpus == "none"
    opt = ConvertOptions(model=args.model, shape=args.shape, iters=args.iters, device=args.device,
                         overrides=overrides, config_files=args.config, timeout_s=args.timeout,
                         gpus=0.0 if cpu else args.gpus_per_job)
    try:
        if args.executor == "local":
            gpus = [] if cpu else (None if args.gpus is None else [g for g in args.gpus.split(",") if g])
            ex = make_executor("local", gpus=gpus, jobs_per_gpu=args.jobs_per_gpu, cpu_workers=args.workers,
                               log_dir=lib.root / "logs")
        else:
            ex = make_executor("ray", address=args.address, max_retries=args.retries,
                               num_gpus_per_job=0.0 if cpu else args.gpus_per_job)
        console.print(f"executor: {ex!r}")
        items = run_batch([Path(r.problem) for r in chosen], lib.root, opt, ex,
                          shares={r.name: r.share for r in rows}, force=args.force, log=console.print)
    except (ValueError, ImportError) as e:
        raise UserError(str(e)) from None
    counts: dict[str, int] = {}
    for it in items:
        counts[it.state] = counts.get(it.state, 0) + 1
    console.print("batch: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    console.print(f"report: aka convert report {lib.root}")
    return 0


def cmd_report(rest: list[str]) -> int:
    from aka.errors import UserError
    from aka.convert.report import write_report
    p = argparse.ArgumentParser(prog="aka convert report", description="Coverage, converted time share and the "
                                "estimated serving-time saving of a kernel library -> REPORT.md and a chart.")
    p.add_argument("library")
    p.add_argument("--out", default=None, help="directory for REPORT.md and coverage.png (default: the library)")
    args = p.parse_args(rest)
    from aka.convert.library import Library
    if not Library(args.library).exists():
        raise UserError(f"{args.library} is not a kernel library (no fallbacks.json, no <op>/status.json)")
    md, png = write_report(Path(args.library), Path(args.out) if args.out else None)
    print(md.read_text())
    print(f"wrote {md}" + (f" and {png}" if png else ""))
    return 0


def cmd_apply(rest: list[str]) -> int:
    from aka.errors import UserError
    try:
        from aka.convert.apply import add_apply_parser
    except ImportError as e:
        raise UserError(f"`aka convert apply` needs aka/convert/apply.py, which this install lacks: {e}") from None
    p = argparse.ArgumentParser(prog="aka convert")
    add_apply_parser(p.add_subparsers(dest="action", required=True))
    args = p.parse_args(["apply", *rest])
    return args.func(args)

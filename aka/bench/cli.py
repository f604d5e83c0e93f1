"""`aka bench list | run | report | weigh`."""
from __future__ import annotations

import sys
from pathlib import Path

from aka.problem import REPO_ROOT


def register(sub) -> None:
    b = sub.add_parser("bench", help="the benchmark: list, run, report, weigh")
    bs = b.add_subparsers(dest="bench_cmd", required=True)

    ls = bs.add_parser("list", help="operators, shapes, categories and weights")
    ls.add_argument("--suite", default=None, help="bench/ops (default), an Atrex-Bench data/ dir, or a KernelBench folder")
    ls.add_argument("--weights", default=None, help="weights file (default bench/weights.json)")
    ls.set_defaults(func=cmd_list)

    rn = bs.add_parser("run", help="run implementations over the suite")
    rn.add_argument("--impl", default="reference,compile",
                    help="comma list: reference, compile, peer (the op's production library, meta.json), "
                         "or directories of candidates (DIR/<op>.py)")
    rn.add_argument("--suite", default=None)
    rn.add_argument("--ops", default=None, help="comma list of operators (default: all)")
    rn.add_argument("--shapes", default=None, help="shape ids / all / small (default: all on GPU, small on CPU)")
    rn.add_argument("--device", default=None)
    rn.add_argument("--out", default=None, help="run directory (default runs/bench-<date>); an existing one resumes")
    rn.add_argument("--weights", default=None)
    rn.add_argument("--timeout", type=float, default=1800.0, help="per-op evaluation timeout, seconds")
    rn.add_argument("--jobs", type=int, default=1, help="GPU: ops evaluated at once; their timed rounds take turns under the GPU lock")
    rn.add_argument("--gpus", default=None,
                    help="GPU: spread the ops over these GPU ids (comma list, or 'all' visible), --jobs on each")
    rn.add_argument("--no-beside", action="store_true",
                    help="time candidates without eager and torch.compile beside them (the peer still is, "
                         "when --impl names it)")
    rn.add_argument("--unlock-compiles", action="store_true",
                    help="GPU: let the GPU lock go while the candidates' Triton kernels compile in their runners "
                         "(faster with --jobs; trusted candidates only, such as the knowledge base's: a candidate "
                         "could use it to run GPU work during another evaluation's timing)")
    rn.set_defaults(func=cmd_run)

    rp = bs.add_parser("report", help="markdown + plots from a run directory")
    rp.add_argument("run_dir")
    rp.add_argument("--weights", help="score with this weights file instead of the weights the run recorded")
    rp.set_defaults(func=cmd_report)

    pe = bs.add_parser("peers", help="our kernels vs each op's production peer, from run records")
    pe.add_argument("run_dirs", nargs="+", help="bench run directories (their records.jsonl)")
    pe.add_argument("--out", default=None, help="markdown file (and a .json beside it)")
    pe.add_argument("--readme", default=None, help="also replace the table between the markers of this file "
                                                   "(bench/README.md)")
    pe.add_argument("--shapes", default=None, help='only these shapes of the ops named, "op=id,id;op2=id" '
                                                   "(other ops' records as they are); the heading says so")
    pe.set_defaults(func=cmd_peers)

    w = bs.add_parser("weigh", help="derive operator weights from a trace or a workload description")
    g = w.add_mutually_exclusive_group(required=True)
    g.add_argument("--trace", help="torch.profiler Chrome trace (JSON) of a serving process")
    g.add_argument("--workload", help="workload YAML (bench/workloads/serving_mix.yaml)")
    w.add_argument("--rules", default=str(REPO_ROOT / "bench" / "kernel_rules.yaml"))
    w.add_argument("--times", default=None, help="bench run directory whose measured times to use")
    w.add_argument("--suite", default=None)
    w.add_argument("--out", default=str(REPO_ROOT / "bench" / "weights.json"))
    w.set_defaults(func=cmd_weigh)


def _suite(args):
    from aka.bench.suite import load_suite
    from aka.errors import UserError
    from aka.problem import ProblemError
    try:
        ops = args.ops.split(",") if getattr(args, "ops", None) else None
        suite = load_suite(args.suite, ops, getattr(args, "weights", None))
    except ProblemError as e:
        raise UserError(str(e)) from None
    for name, why in suite.failed:
        print(f"aka: skipped {name}, it does not load: {why}", file=sys.stderr)
    if suite.failed:
        print(f"aka: {len(suite.failed)} operator(s) skipped; {len(suite.problems)} loaded", file=sys.stderr)
    return suite


def cmd_list(args) -> int:
    from rich.console import Console
    from rich.table import Table
    suite = _suite(args)
    from aka.console import key_column, print_table
    t = Table(title=f"suite {suite.root}")
    key_column(t, "op", [p.name for p in suite.problems])
    for c in ("category", "shapes", "decode", "prefill", "small", "weight"):
        t.add_column(c, justify="left" if c == "category" else "right")
    n_shapes = 0
    for p in suite.problems:
        phases = [s.info.get("phase") for s in p.shapes.values()]
        n_shapes += len(p.shapes)
        t.add_row(p.name, p.category or "-", str(len(p.shapes)), str(phases.count("decode")),
                  str(phases.count("prefill")), str(len(p.small_shapes)), f"{suite.weight(p.name):.4f}")
    c = Console(soft_wrap=True)
    print_table(t, c)
    cats = {p.category for p in suite.problems}
    c.print(f"{len(suite.problems)} operators, {n_shapes} shapes, {len(cats)} categories, "
            f"{sum(1 for p in suite.problems if p.category)} categorised; weights sum "
            f"{sum(suite.weights.values()):.4f} ({suite.weights_source})")
    return 0


class _Progress:
    def __init__(self, progress, task):
        self.p, self.task = progress, task

    def describe(self, text):
        self.p.update(self.task, description=text)

    def advance(self):
        self.p.advance(self.task)

    def log(self, text):
        self.p.console.print(text, markup=False, highlight=False)


def cmd_run(args) -> int:
    import datetime as _dt

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from aka.bench.report import write_report
    from aka.bench.run import RunOptions, run_bench
    from aka.bench.score import by_impl
    from aka.bench.run import load_records
    suite = _suite(args)
    out = Path(args.out or f"runs/bench-{_dt.datetime.now():%Y%m%d-%H%M%S}")
    opts = RunOptions(impls=[i.strip() for i in args.impl.split(",") if i.strip()], out=out,
                      device=args.device, shapes=args.shapes, timeout_s=args.timeout, jobs=args.jobs,
                      beside=not args.no_beside, gpus=_gpu_list(args.gpus), unlock_compiles=args.unlock_compiles)
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn())
    with Progress(*cols) as prog:
        task = prog.add_task("starting", total=len(suite.problems))
        run_bench(suite, opts, _Progress(prog, task))
    if not load_records(out):  # e.g. --impl peer over ops that have none
        print(f"aka bench run: nothing to record for {args.impl} over these ops; no report", file=sys.stderr)
        return 0
    report = write_report(out)
    for impl, s in by_impl(load_records(out)).items():
        print(f"{impl}: score {s['score']:.4f}, pass {s['pass_rate']:.2f}, fallback {s['fallback_rate']:.2f}, "
              f"fast_1 vs eager {s['fast_1_eager']:.2f}, vs compile {s['fast_1_compile']:.2f}")
    print(f"records: {out / 'records.jsonl'}; report: {report}")
    return 0


def cmd_report(args) -> int:
    from aka.bench.report import write_report
    try:
        print(write_report(Path(args.run_dir), Path(args.weights) if args.weights else None))
    except (ValueError, FileNotFoundError) as e:
        print(f"aka bench report: {e}", file=sys.stderr)
        return 2
    return 0


def cmd_peers(args) -> int:
    from aka.bench.peers import write
    from aka.errors import UserError
    try:
        md = write([Path(d) for d in args.run_dirs], Path(args.out) if args.out else None,
                   Path(args.readme) if args.readme else None, args.shapes)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(str(e)) from None
    print(md, end="")
    return 0


def cmd_weigh(args) -> int:
    from aka.bench import weigh
    suite = _suite(args)
    if args.trace:
        w, summary = weigh.weights_from_trace(Path(args.trace), Path(args.rules))
        inputs, method = [Path(args.trace), Path(args.rules)], "trace: GPU kernel time per operator (kernel_rules.yaml)"
    else:
        try:
            w, summary = weigh.weights_from_workload(suite, Path(args.workload), Path(args.times) if args.times else None)
        except ValueError as e:
            print(f"aka bench weigh: {e}", file=sys.stderr)
            return 2
        inputs = [Path(args.workload)] + ([Path(args.times) / "records.jsonl"] if args.times else [])
        method = f"workload: {Path(args.workload).name}; per-shape times {summary['times']}"
        if summary.get("stated"):
            method += f"; stated weights (the workload's reasons) for {', '.join(summary['stated'])}"
    command = "aka bench weigh " + (f"--trace {weigh._rel(Path(args.trace))} --rules {weigh._rel(Path(args.rules))}"
                                    if args.trace else f"--workload {weigh._rel(Path(args.workload))}"
                                    + (f" --times {weigh._rel(Path(args.times))}" if args.times else ""))
    out = weigh.write_weights(w, summary, method, inputs, Path(args.out), suite, command=command)
    top = sorted(w.items(), key=lambda kv: -kv[1])[:10]
    print(f"wrote {out} ({method})")
    for op, v in top:
        print(f"  {op:28s} {v:.4f}")
    return 0


def _gpu_list(spec: str | None) -> list[str] | None:
    """--gpus: None (as visible, one device), 'all' (every GPU this host shows) or a comma list."""
    from aka.errors import UserError
    if not spec:
        return None
    if spec == "all":
        from aka.executors import detect_gpus
        gpus = detect_gpus()
        if not gpus:
            raise UserError("--gpus all: no GPU is visible")
        return gpus
    gpus = [g.strip() for g in spec.split(",") if g.strip()]
    if not gpus or not all(g.isdigit() for g in gpus) or len(set(gpus)) != len(gpus):
        raise UserError(f"--gpus takes 'all' or distinct GPU ids like 0,1 (got {spec!r})")
    return gpus

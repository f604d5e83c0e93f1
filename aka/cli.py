"""The `aka` command line. Subcommands take --flags and also `key=value` words:

    aka eval bench/ops/rms_norm cand.py --shapes 0,3 --device cpu --json out.json
    aka optimize op=rms_norm shape=4096x4096
"""
from __future__ import annotations

import argparse
import sys


class UserError(Exception):
    """A one-line error for bad input; exits 2."""


def kv_to_flags(argv: list[str]) -> list[str]:
    """`shape=4096x4096` -> `--shape 4096x4096`; words that are not key=value pass unchanged."""
    out = []
    for a in argv:
        if not a.startswith("-") and "=" in a and a.split("=", 1)[0].replace("_", "").replace("-", "").isalnum():
            k, v = a.split("=", 1)
            out += [f"--{k.replace('_', '-')}", v]
        else:
            out.append(a)
    return out


def cmd_eval(args) -> int:
    import json
    from pathlib import Path

    from aka.evaluate.api import CandidateError, EvalConfig, evaluate
    from aka.evaluate.report import render
    from aka.evaluate.sandbox import SandboxConfig
    from aka.problem import ProblemError, load_problem
    from rich.console import Console

    console = Console(stderr=False)
    cfg = EvalConfig(device=args.device, draws=args.draws, seed=args.seed, outliers=not args.no_outliers,
                     timing=not args.no_timing, fresh_baselines=args.fresh_baselines, ncu=args.ncu,
                     ncu_shape=args.ncu_shape,
                     sandbox=SandboxConfig(timeout_s=args.timeout, idle_timeout_s=args.idle_timeout))
    try:
        problem = load_problem(args.problem)
        for s in problem.select(args.shapes):
            if s.info.get("scaled"):  # KernelBench's small shape: say what it changed
                console.print(f"[dim]shape {s.id}: module constants scaled: {s.info['scaled']}[/]")
        with console.status("evaluating…") as status:
            def progress(msg):
                status.update(f"{msg.get('stage')} {msg.get('shape') or ''}")
            res = evaluate(problem, args.candidate, shapes=args.shapes, config=cfg, strict=True,
                           on_progress=progress)
    except (ProblemError, CandidateError) as e:
        raise UserError(str(e)) from None
    render(res, console)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(res.dumps())
        console.print(f"[dim]wrote {args.json}[/]")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aka", description="Autonomous GPU-kernel optimization, measured honestly.")
    sub = p.add_subparsers(dest="cmd", required=True)

    e = sub.add_parser("eval", help="evaluate a candidate kernel against a problem")
    e.add_argument("problem", help="operator directory, KernelBench .py file, or a bundled op name")
    e.add_argument("candidate", help="candidate .py file defining ModelNew (or Model)")
    e.add_argument("--shapes", default=None, help="comma-separated shape ids, 'all', 'small' or 'first'")
    e.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    e.add_argument("--json", default=None, help="write the EvalResult JSON here")
    e.add_argument("--draws", type=int, default=3, help="fresh input draws per shape (min 3)")
    e.add_argument("--seed", type=int, default=None, help="fix the input seed (default: random)")
    e.add_argument("--no-outliers", action="store_true", help="skip the outlier stage")
    e.add_argument("--no-timing", action="store_true", help="correctness only")
    e.add_argument("--fresh-baselines", action="store_true", help="re-measure eager/compile baselines")
    e.add_argument("--ncu", action="store_true", help="add Nsight Compute metrics for one shape")
    e.add_argument("--ncu-shape", default=None, help="shape id for --ncu (default: the largest)")
    e.add_argument("--timeout", type=float, default=900.0, help="whole-evaluation timeout, seconds")
    e.add_argument("--idle-timeout", type=float, default=180.0, help="kill when no progress for this long")
    e.set_defaults(func=cmd_eval)

    from aka import cli_more
    cli_more.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = kv_to_flags(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"aka: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aka: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The `aka` command line. Subcommands take --flags and also `key=value` words:

    aka eval bench/ops/rms_norm cand.py --shapes 0,3 --device cpu --json out.json
    aka optimize op=rms_norm shape=4096x4096

`aka eval` exits with the verdict's class (EVAL_EXIT below; README "The harness").
"""
from __future__ import annotations

import argparse
import sys

from aka.errors import MissingExtra, UserError, missing_extra  # noqa: F401  (UserError: re-exported)

# `aka eval` exit codes. 2 is argparse's own code for a usage error, kept for every UserError.
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_UNFINISHED, EXIT_INTERNAL = 0, 1, 2, 3, 4
EVAL_EXIT = {"pass": EXIT_PASS, "incorrect": EXIT_FAIL, "fallback": EXIT_FAIL, "rejected": EXIT_FAIL,
             "compile_error": EXIT_FAIL, "runtime_error": EXIT_FAIL,
             # the worker was killed (hang, time limit) or died (segfault, out of memory): no verdict reached
             "timeout": EXIT_UNFINISHED, "crashed": EXIT_UNFINISHED}
EVAL_EPILOG = ("exit status: 0 pass; 1 the candidate does not pass (incorrect, fallback, rejected, compile_error, "
               "runtime_error); 2 bad input; 3 the evaluation did not finish (timeout, crashed); "
               "4 aka itself failed (a bug: the traceback is on stderr)")


# Options whose value may itself be KEY=VALUE (`aka kb compile-check --set BINS=128`): their value stays a word.
KV_VALUED = ("--set", "--shapes")   # --shapes: `aka bench peers --shapes "op=1,2"`


def kv_to_flags(argv: list[str]) -> list[str]:
    """`shape=4096x4096` -> `--shape 4096x4096`; words that are not key=value pass unchanged, and so
    does the value of an option in KV_VALUED."""
    out = []
    for i, a in enumerate(argv):
        if i and argv[i - 1] in KV_VALUED:
            out.append(a)
        elif not a.startswith("-") and "=" in a and a.split("=", 1)[0].replace("_", "").replace("-", "").isalnum():
            k, v = a.split("=", 1)
            out += [f"--{k.replace('_', '-')}", v]
        else:
            out.append(a)
    return out


def _eval_shapes(args, problem, device: str, console) -> str | list[str] | None:
    """The shapes to run: as asked; without --shapes on CPU, the op's small ones. The interpreter
    runs each program in Python, and a benchmark shape is large (rms_norm's 4096x4096 is 16.8M
    elements against its small shapes' 672 to 4,329), which a first `aka eval` without a GPU
    should not sit through unannounced."""
    if args.shapes is not None or not device.startswith("cpu"):
        return args.shapes
    if problem.small_shapes:
        console.print(f"[bold yellow]no GPU: the interpreter checks correctness only, on {problem.name}'s small "
                      f"shapes ({', '.join(problem.small_shapes)}); --shapes all runs every benchmark shape[/]")
        return "small"
    console.print(f"[bold yellow]no GPU: the interpreter checks correctness only, every shape of {problem.name} "
                  "(it lists no small_shapes); large shapes are slow there[/]")
    return None


def cmd_eval(args) -> int:
    from pathlib import Path

    from rich.console import Console

    from aka.evaluate.api import CandidateError, EvalConfig, evaluate, resolve_device
    from aka.evaluate.report import render
    from aka.evaluate.sandbox import SandboxConfig
    from aka.problem import ProblemError, load_problem

    console = Console(soft_wrap=True)  # a piped log keeps each message on one line, greppable
    cfg = EvalConfig(device=args.device, draws=args.draws, seed=args.seed, outliers=not args.no_outliers,
                     timing=not args.no_timing, fresh_baselines=args.fresh_baselines,
                     ncu=args.ncu, ncu_stalls=args.ncu_stalls,
                     compile_report=args.compile_report,
                     peer=not args.no_peer,
                     ncu_shape=args.ncu_shape,
                     sandbox=SandboxConfig(timeout_s=args.timeout, idle_timeout_s=args.idle_timeout))
    try:
        problem = load_problem(args.problem)
        cfg.device = resolve_device(cfg.device)
        shapes = _eval_shapes(args, problem, cfg.device, console)
        for s in problem.select(shapes):
            if s.info.get("scaled"):  # KernelBench's small shape: say what it changed
                console.print(f"[dim]shape {s.id}: module constants scaled: {s.info['scaled']}[/]")
        if console.is_terminal:
            with console.status("evaluating…") as status:
                res = evaluate(problem, args.candidate, shapes=shapes, config=cfg, strict=True,
                               on_progress=lambda m: status.update(f"{m.get('stage')} {m.get('shape') or ''}"))
        else:
            res = evaluate(problem, args.candidate, shapes=shapes, config=cfg, strict=True,
                           on_progress=_ProgressLines())
    except (ProblemError, CandidateError) as e:
        raise UserError(str(e)) from None
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - aka's own failure gets its own exit code, not the verdicts' 1
        if isinstance(e, ModuleNotFoundError) and missing_extra(e):
            raise
        import traceback
        traceback.print_exc()
        print(f"aka: internal error, no verdict: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_INTERNAL
    render(res, console)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(res.dumps())
        console.print(f"[dim]wrote {args.json}[/]")
    return EVAL_EXIT.get(res.status, EXIT_INTERNAL)


class _ProgressLines:
    """Piped or logged: one stderr line per new stage or shape (the worker's 5 s heartbeats
    repeat the last one), each with the seconds since the start."""

    def __init__(self):
        import time
        self.t0, self.last, self.clock = time.monotonic(), None, time.monotonic

    def __call__(self, msg: dict) -> None:
        key = (msg.get("stage"), msg.get("shape"))
        if key == self.last:
            return
        self.last = key
        where = f" shape {key[1]}" if key[1] else ""
        print(f"[{self.clock() - self.t0:6.1f} s] {key[0]}{where}", file=sys.stderr, flush=True)


def cmd_hw(args) -> int:
    import json

    from aka import hardware
    if args.action == "calibrate":
        import torch
        if not torch.cuda.is_available():
            raise UserError("aka hw calibrate needs a CUDA GPU")
        print(json.dumps(hardware.calibrate("cuda"), indent=2))
        return 0
    st = hardware.read_device_state(0)
    print(json.dumps(vars(st) if st else {"gpu": None, "note": "no NVIDIA GPU visible through NVML"}, indent=2))
    return 0


def add_eval(sub) -> None:
    from aka.evaluate.api import EvalConfig
    from aka.evaluate.sandbox import SandboxConfig
    d, box = EvalConfig(), SandboxConfig()  # the flags' defaults are the library's
    e = sub.add_parser("eval", help="evaluate a candidate kernel against a problem", epilog=EVAL_EPILOG)
    e.add_argument("problem", help="operator directory, KernelBench .py file, or a bundled op name")
    e.add_argument("candidate", help="candidate .py file defining ModelNew (or Model)")
    e.add_argument("--shapes", default=None,
                   help="comma-separated shape ids, 'all', 'small', 'first' or 'last' (default: all on a GPU, small on CPU)")
    e.add_argument("--device", default=d.device, help="cuda or cpu (default: cuda when available)")
    e.add_argument("--json", default=None, help="write the EvalResult JSON here")
    e.add_argument("--draws", type=int, default=d.draws, help=f"fresh input draws per shape (min 3, default {d.draws})")
    e.add_argument("--seed", type=int, default=d.seed, help="fix the input seed (default: random)")
    e.add_argument("--no-outliers", action="store_true", default=not d.outliers, help="skip the outlier stage")
    e.add_argument("--no-timing", action="store_true", default=not d.timing, help="correctness only")
    e.add_argument("--fresh-baselines", action="store_true", default=d.fresh_baselines,
                   help="re-measure eager/compile baselines")
    e.add_argument("--no-peer", action="store_true", default=not d.peer,
                   help="do not check and time the op's production peer (meta.json `peer`) beside the candidate")
    e.add_argument("--ncu", action="store_true", default=d.ncu, help="add Nsight Compute metrics for one shape")
    e.add_argument("--ncu-shape", default=d.ncu_shape, help="shape id for --ncu (default: the largest)")
    e.add_argument("--ncu-stalls", action="store_true", default=d.ncu_stalls,
                   help="--ncu with the warp-state stall reasons (what the warps wait on per issued instruction)")
    e.add_argument("--compile-report", action="store_true", default=d.compile_report,
                   help="compile the candidate's kernels offline for sm_90a on one shape, in a confined process, "
                        "and report registers, spills, shared memory and programs per SM (no GPU needed)")
    e.add_argument("--timeout", type=float, default=box.timeout_s,
                   help=f"whole-evaluation timeout, seconds (default {box.timeout_s:g})")
    e.add_argument("--idle-timeout", type=float, default=box.idle_timeout_s,
                   help=f"kill when no progress for this long (default {box.idle_timeout_s:g})")
    e.set_defaults(func=cmd_eval)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aka", description="Autonomous GPU-kernel optimization, measured honestly.")
    sub = p.add_subparsers(dest="cmd", required=True)
    add_eval(sub)

    h = sub.add_parser("hw", help="hardware: show the detected GPU and its ceilings, or calibrate")
    h.add_argument("action", choices=["show", "calibrate"])
    h.set_defaults(func=cmd_hw)

    # Each registers argparse only; the heavy imports (the loop, chromadb, torch) happen inside the commands.
    from aka.agent.cli import add_parser as add_optimize
    from aka.bench.cli import register as add_bench
    from aka.convert.cli import add_parser as add_convert  # argparse only; the batch imports lazily
    from aka.kb.cli import add_parser as add_kb
    add_optimize(sub)
    add_kb(sub)
    add_bench(sub)
    add_convert(sub)
    from aka.exp.cli import add_parser as add_exp  # argparse only; the grid and the report import lazily
    add_exp(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = kv_to_flags(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"aka: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as e:
        known = missing_extra(e)
        if known is None:
            raise
        print(f"aka: error: {known}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("aka: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

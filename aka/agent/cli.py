"""`aka optimize`: parse, resolve the config, build the proposer, run the loop, write the report.

    aka optimize op=rms_norm shape=4096x4096
    aka optimize op=bench/ops/fused_moe shape=all model=anthropic:claude-opus-4-5 iters=40
    aka optimize op=rms_norm model=offline dropout.p=0.3 config=my.yaml
    aka optimize resume=rms_norm-20261201-101500 iters=60
"""
from __future__ import annotations

import argparse
import os

# flag -> dotted config path; a flag left at None does not override
FLAG_PATHS = {
    "op": "op", "shape": "shape", "model": "model", "n": "n", "seed": "seed", "runs_dir": "runs_dir",
    "run_id": "run_id", "live": "live", "iters": "budget.iterations", "device": "eval.device",
    "kernels_dir": "offline.kernels_dir", "target": "stop.target_sol", "patience": "dropout.patience",
    "max_cost": "budget.max_cost_usd", "max_wall": "budget.max_wall_s",
}
KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
EXAMPLES = """examples:
  aka optimize op=rms_norm shape=4096x4096                        no API key: the offline proposer
  aka optimize op=bench/ops/fused_moe shape=all model=anthropic:<model> iters=40
  aka optimize op=rms_norm model=openai-compat:<model>@http://localhost:8000/v1
  aka optimize op=rms_norm model=offline dropout.p=0.3 config=my.yaml
  aka optimize resume=<run id> iters=60                            continue a run"""


class _OverrideParser(argparse.ArgumentParser):
    """Takes `section.key=value` words anywhere among the flags: aka.cli turns `op=x` into
    `--op x` but leaves dotted words alone, and argparse cannot interleave a `*` positional."""

    def parse_known_args(self, args=None, namespace=None):
        words, rest, after_flag = [], [], False
        for a in list(args or []):
            if not after_flag and not a.startswith("-") and "=" in a:
                words.append(a)
            else:
                rest.append(a)
            after_flag = a.startswith("--") and "=" not in a
        ns, extra = super().parse_known_args(rest, namespace)
        ns.overrides = words
        return ns, extra


def add_parser(sub) -> None:
    o = sub.add_parser("optimize", help="search for a faster verified Triton kernel (LLM or offline proposer)",
                       usage="aka optimize op=OP [shape=SPEC] [model=SPEC] [iters=N] [section.key=value ...]\n"
                             "       aka optimize resume=RUN_ID [iters=N] [section.key=value ...]",
                       description=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="Every --flag VALUE above is also flag=VALUE (--run-id x is run_id=x).\n"
                              "Config overrides: section.key=value words anywhere, e.g. dropout.p=0.3 "
                              "llm.cache_mode=off\n(configs/optimize.yaml documents every key).")
    o.__class__ = _OverrideParser  # add_parser builds a plain ArgumentParser; only parse_known_args differs
    o.add_argument("--op", help="bundled op name or operator directory / KernelBench file")
    o.add_argument("--shape", help="shape id(s), all, small, first, or AxB[xC] (default all)")
    o.add_argument("--model", help="anthropic:<model>, openai:<model>, openai-compat:<model>@<url>, or offline")
    o.add_argument("--iters", "--iterations", dest="iters", type=int, help="rounds (budget.iterations)")
    o.add_argument("--n", type=int, help="candidates per round")
    o.add_argument("--device", help="auto, cuda or cpu (eval.device)")
    o.add_argument("--config", action="append", default=[], help="YAML config file (repeatable, later wins)")
    o.add_argument("--resume", help="run id (or run directory) to continue")
    o.add_argument("--runs-dir", help="where runs live (default runs/)")
    o.add_argument("--run-id", help="name of a new run (default <op>-<UTC time>)")
    o.add_argument("--kernels-dir", help="offline proposer: kernel families root (offline.kernels_dir)")
    o.add_argument("--target", type=float, help="stop at this objective (stop.target_sol)")
    o.add_argument("--patience", type=int, help="stalled rounds before a dropout (dropout.patience)")
    o.add_argument("--max-cost", type=float, help="USD cap (budget.max_cost_usd)")
    o.add_argument("--max-wall", type=float, help="seconds cap (budget.max_wall_s)")
    o.add_argument("--seed", type=int, help="dropout RNG seed")
    o.add_argument("--live", choices=["auto", "on", "off"], help="live panel (default auto: on a terminal)")
    o.set_defaults(func=cmd_optimize)


def _overrides(args) -> list[tuple[str, str]]:
    from aka.errors import UserError
    out = [(path, getattr(args, flag)) for flag, path in FLAG_PATHS.items() if getattr(args, flag) is not None]
    for word in args.overrides:
        if "=" not in word:
            raise UserError(f"unexpected argument {word!r}: config overrides look like section.key=value")
        k, v = word.split("=", 1)
        out.append((k, v))
    return out


def choose_proposer_spec(model: str) -> tuple[str, str | None]:
    """(spec, notice): the offline proposer when asked for, or when the provider's key is missing."""
    if model == "offline":
        return "offline", None
    provider = model.split(":", 1)[0]
    env = KEY_ENV.get(provider)
    if env and not os.environ.get(env):
        return "offline", f"no {env} in the environment for {model}: using the offline proposer instead"
    return model, None


def cmd_optimize(args) -> int:
    import yaml
    from rich.console import Console

    from aka.agent.config import ConfigError, from_dict, load_config, set_path, validate
    from aka.agent.shapes import task_shapes
    from aka.evaluate.api import resolve_device
    from aka.problem import load_problem
    from aka.agent.store import RunStore, StoreError, new_run_id
    from aka.errors import UserError
    from aka.llm import FatalLLMError, check_installed
    from aka.problem import ProblemError

    console = Console(soft_wrap=True)  # logs: never break a line inside a path or message
    try:
        if args.resume:
            store = RunStore.open(args.runs_dir or "runs", args.resume)
            cfg = from_dict(yaml.safe_load((store.root / "config.yaml").read_text()) or {})
        else:
            cfg = load_config(args.config)
        pairs = _overrides(args)
        for k, v in pairs:
            set_path(cfg, k, v)
        validate(cfg)
        if not cfg.op:
            raise UserError("which operator? op=<name or path> (or resume=<run id>)")
        problem = load_problem(cfg.op)
        device = resolve_device(None if cfg.eval.device == "auto" else cfg.eval.device)
        task = task_shapes(problem, cfg.shape, device, cfg.eval.cpu_max_elems)
        if args.resume:
            check_same_hardware(store, device, cfg.op)
        check_installed(choose_proposer_spec(cfg.model)[0])
        if not args.resume:
            store = RunStore.create(cfg.runs_dir, cfg.run_id or new_run_id(cfg.op))
        return run_optimize(cfg, store, problem, task, console, resumed=bool(args.resume), overrides=dict(pairs))
    except (ConfigError, ProblemError, StoreError, FatalLLMError) as e:
        raise UserError(str(e)) from None


def hardware_in_hand(device: str) -> str:
    """The GPU model a cuda device is (torch's name for it, aka.kb.verify.gpu_name), or "cpu"."""
    from aka.kb.verify import gpu_name
    return (gpu_name(device) or device) if device.startswith("cuda") else "cpu"


def check_same_hardware(store, device: str, op: str) -> None:
    """A resumed run goes on only on the hardware it was timed on: its incumbent's objective and
    its candidates' per-shape times decide what the next round must beat, and a time from another
    GPU model (an H100 run resumed on an H200, or a CPU run on a GPU) would be compared as if it
    were this one's."""
    from aka.errors import UserError
    ran_on = store.measured_on()
    here = hardware_in_hand(device)
    if ran_on is not None and ran_on != here:
        raise UserError(f"run {store.run_id} was timed on {ran_on}, and this evaluation device is {here}: its "
                        "candidates' times would be compared with times from another device. Resume it on "
                        f"{'the CPU' if ran_on == 'cpu' else 'a ' + ran_on}, or start a new run here "
                        f"(op={op}, the same settings).")


def build_proposer(cfg, problem, store, budget, console):
    from aka.agent.llm_proposer import LLMProposer
    from aka.agent.offline import OfflineProposer
    from aka.agent.prompts import PromptRenderer
    spec, notice = choose_proposer_spec(cfg.model)
    if notice:
        console.print(f"[bold yellow]{notice}[/]")
        store.event("notice", message=notice)
    if spec == "offline":
        retune = None
        if cfg.offline.retune:
            from aka.agent.offline import RetuneSettings
            from aka.hardware import cache_dir
            retune = RetuneSettings(str(store.root / "retune"), cfg.offline.tune_s, str(cache_dir() / "locks"),
                                    wall_left=lambda: None if budget.max_wall_s is None
                                    else budget.max_wall_s - budget.elapsed_s())
        prop = OfflineProposer(problem, cfg.offline.kernels_dir, exclude_op=cfg.retrieval.exclude_op,
                               use_records=cfg.retrieval.enabled, independent=not cfg.feedback, seed=cfg.seed,
                               dispatch=cfg.dispatch.enabled, retune=retune)
        console.print(f"[bold]{prop.banner}[/]")
        for w in prop.warnings:
            console.print(f"[yellow]{w}[/]")
        store.event("notice", message=prop.banner, warnings=prop.warnings)
        return prop
    if spec.startswith("scripted:"):
        from aka.agent.api import scripted_llm
        return LLMProposer(scripted_llm(spec, problem.name, budget), PromptRenderer(cfg.prompts_dir), cfg.llm,
                           store=store, target_gpu=cfg.target_gpu, independent=not cfg.feedback, seed=cfg.seed)
    from aka.llm import RetryConfig, build_llm
    cache = cfg.llm.cache_dir or str(__import__("pathlib").Path(os.environ.get(
        "AKA_CACHE_DIR", os.path.expanduser("~/.cache/aka"))) / "llm")
    retry = RetryConfig(cfg.llm.retry_attempts, cfg.llm.retry_base_delay_s, cfg.llm.retry_max_delay_s)
    extra = {"base_url": cfg.llm.base_url} if cfg.llm.base_url else {}
    llm = build_llm(spec, cache_dir=None if cfg.llm.cache_mode == "off" else cache, cache_mode=cfg.llm.cache_mode,
                    retry=retry, budget=budget, timeout_s=cfg.llm.timeout_s, **extra)
    return LLMProposer(llm, PromptRenderer(cfg.prompts_dir), cfg.llm, store=store, target_gpu=cfg.target_gpu,
                       independent=not cfg.feedback, seed=cfg.seed)


def build_retriever(cfg):
    """The LLM proposer's retriever for cfg.retrieval (the loop skips it when retrieval is off)."""
    r, ex = cfg.retrieval, cfg.retrieval.exclude_op
    if r.backend == "files":
        from aka.kb.file_retriever import FileRetriever
        return FileRetriever(r.kb_dir, r.max_chars, exclude_op=ex)
    if r.backend == "chroma":
        from aka.kb.retriever import ChromaRetriever
        return ChromaRetriever(r.kb_dir, max_chars=r.max_chars, exclude_op=ex)
    from aka.kb.retriever import make_retriever  # Chroma hybrid index with the kb extra, else files
    return make_retriever(r.kb_dir, r.max_chars, exclude_op=ex)


def run_optimize(cfg, store, problem, task, console, *, resumed: bool = False, overrides: dict | None = None) -> int:
    from aka.agent.report import verify_command
    outcome = execute(cfg, store, problem, task, console, resumed=resumed, overrides=overrides)
    inc = outcome.incumbent
    if inc is not None:
        console.print(best_line(inc, store.root))
        console.print(f"re-verify: {verify_command(store, problem, task)}")
    else:
        console.print("[bold yellow]no candidate passed[/]")
    if outcome.stop_kind == "fatal":
        console.print(f"[bold red]run stopped: {outcome.reason}[/]")
        return 1
    return 0


def best_line(inc, root) -> str:
    """The run's closing line: its best kernel, and, when that one was promoted by the closing
    dispatcher's rule, whether it is no better than the kernel it replaced (a tie) or ahead of it
    beyond noise by less than eval.min_rel_gain."""
    from aka.agent.loop import AHEAD, TIE
    why = str(inc.meta.get("decision", ""))
    return (f"[bold green]best: {inc.id}, objective {inc.score.value:.4g} ({inc.score.kind})[/]"
            + (f" ({why}: no better than the kernel it replaced)" if why.startswith(TIE) else
               f" ({why})" if why.startswith(AHEAD) else "")
            + f" -> {root / 'best.py'}, {root / 'kernel_module.py'}")


def ensure_calibration(device: str, console, store) -> dict | None:
    """The cached measured ceilings of this GPU model, measured first when there are none (under the
    GPU lock, exclusive: a calibration is a timing). Without them every record's
    sol_fraction_measured, and the report's column of it, stays empty. A failure is a notice, not a
    stop: the datasheet fractions stand."""
    import torch

    from aka import hardware
    from aka.evaluate.gpulock import GpuLock, gpu_key
    name = torch.cuda.get_device_name(torch.device(device))
    have = hardware.load_calibration(name)
    if have is not None:
        return have
    msg = (f"no measured ceilings for {name} in {hardware.calibration_path(name).parent}: measuring them once "
           "(aka hw calibrate: copy bandwidth, matmul rates; about 30 s) for the report's fractions of the "
           "measured ceiling (eval.calibrate=false skips it)")
    console.print(f"[yellow]{msg}[/]")
    store.event("notice", message=msg)
    try:
        with GpuLock(hardware.cache_dir() / "locks", gpu_key(device)).exclusive():
            got = hardware.calibrate(device, save=True)
    except Exception as e:  # noqa: BLE001 - the run goes on with datasheet fractions only
        store.event("notice", message=f"calibration failed: {type(e).__name__}: {e}")
        console.print(f"[yellow]calibration failed ({type(e).__name__}: {e}); datasheet fractions only[/]")
        return None
    store.event("calibration", gpu=name, copy_tbps=got.get("copy_tbps"), bf16_tflops=got.get("bf16_tflops"),
                fp8_tflops=got.get("fp8_tflops"), warnings=got.get("warnings", []))
    return got


def execute(cfg, store, problem, task, console, *, resumed: bool = False, overrides: dict | None = None):
    """The loop and the report, without the closing lines: the Outcome (aka.agent.api calls this)."""
    import sys

    from aka.agent.live import LiveView
    from aka.agent.loop import Optimizer
    from aka.agent.report import write_report
    from aka.agent.state import State, make_budget

    device = task.device
    cfg.dump(store.root / "config.yaml")
    state = State.from_store(store) if resumed else State()
    budget = make_budget(cfg, state.prior_usage, state.prior_wall_s)
    if task.note:
        console.print(f"[bold yellow]{task.note}[/]")
    if resumed:
        store.event("resume", from_round=state.round, incumbent=state.incumbent.id if state.incumbent else None,
                    overrides=overrides or {})
    else:
        store.event("start", op=cfg.op, problem=str(problem.root), device=device, shapes=task.ids,
                    requested=[s.id for s in task.requested], weights=task.weights, model=cfg.model)
    if task.note:
        store.event("notice", message=task.note)
    if device.startswith("cuda") and cfg.eval.calibrate:
        ensure_calibration(device, console, store)
    proposer = build_proposer(cfg, problem, store, budget, console)
    retriever = None
    if proposer.name != "offline":
        retriever = build_retriever(cfg)
    live = cfg.live == "on" or (cfg.live == "auto" and sys.stdout.isatty())
    header = f"{store.run_id} · {problem.name} · {proposer.name} · {device}"
    console.print(f"run [bold]{store.root}[/] ({'resumed at round ' + str(state.round + 1) if resumed else 'new'})")
    opt = None
    outcome = None
    try:
        with LiveView(console, live, header) as view:
            opt = Optimizer(cfg, problem, task, proposer, store, retriever=retriever, state=state, budget=budget,
                            view=view)
            outcome = opt.run()
    finally:
        stop = (outcome.stop_kind, outcome.reason) if outcome else ("crash", "see events.jsonl")
        report = write_report(store, state, problem, task, cfg, proposer.name, stop,
                              say=lambda line: console.print(line, style="yellow", markup=False, highlight=False))
        console.print(f"report: {report}")
    return outcome

"""The batch: one `optimize` job per operator through an executor, each filed in the library as it ends.

The executor is anything with `run(jobs, on_result)` (aka/executors.py); the batch neither knows
nor cares whether the jobs run on this host's GPUs or on a Ray cluster. Operators already done in
the library are skipped, and every result is recorded the moment its job ends, so a batch that
dies (or a worker killed mid-batch) loses only the jobs still running; the next run does those.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aka.convert.library import Library
from aka.executors import Executor, Job, JobResult


@dataclass
class ConvertOptions:
    """What every operator's optimize run gets (aka.agent.api.optimize's arguments)."""
    model: str = "offline"              # offline | scripted:<file.json> | anthropic:<model> | ...
    shape: str = "all"                  # per operator; on CPU the op's small shapes replace large ones
    iters: int | None = None            # None: configs' budget.iterations
    device: str | None = None           # None: cuda when visible to the job, else cpu
    overrides: dict = field(default_factory=dict)   # dotted config paths, as `aka optimize` takes them
    config_files: list[str] = field(default_factory=list)
    timeout_s: float | None = None      # per operator, from its job's start; None: the run's own budget
    gpus: float = 1.0                   # per job (Ray's num_gpus; locally a job gets its slot's GPU)


def convert_one(problem: str, runs_dir: str, name: str, model: str, shape: str, iters: int | None,
                device: str | None, overrides: dict, config_files: list[str]) -> dict:
    """The job function: one optimize run, its summary returned (the kernel source included)."""
    from aka.agent.api import optimize
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    # pid: a retried job (Ray after a dead worker) must not collide with its first attempt's run
    run_id = f"{name}-{stamp}-{os.getpid()}"
    return optimize(problem, shape=shape, model=model, iters=iters, device=device, runs_dir=runs_dir,
                    run_id=run_id, config_files=config_files, overrides=overrides)


@dataclass
class BatchItem:
    name: str
    problem: str
    state: str                 # pass | no_kernel | failed | skipped (done before)
    why: str = ""
    wall_s: float | None = None


def op_name(problem: Path) -> str:
    from aka.problem import load_problem
    return load_problem(problem).name


def run_batch(problems: list[Path], library: Path, opt_cfg: ConvertOptions, executor: Executor, *,
              shares: dict[str, float] | None = None, force: bool = False,
              log: Callable[[str], None] = print) -> list[BatchItem]:
    lib = Library(library)
    lib.root.mkdir(parents=True, exist_ok=True)
    names = [op_name(p) for p in problems]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"two operators share the name {sorted(dup)[0]!r}: the library keys operators by name")
    shares = shares or {}
    items: dict[str, BatchItem] = {}
    jobs: list[Job] = []
    paths = dict(zip(names, map(str, problems)))
    for n in names:
        if not force and lib.is_done(n):
            st = lib.status(n)
            items[n] = BatchItem(n, paths[n], "skipped", f"done before: {st.get('state')}")
            continue
        kw = {"problem": str(Path(paths[n]).resolve()), "runs_dir": str(lib.runs_dir.resolve()), "name": n,
              "model": opt_cfg.model, "shape": opt_cfg.shape, "iters": opt_cfg.iters, "device": opt_cfg.device,
              "overrides": dict(opt_cfg.overrides), "config_files": [str(Path(c).resolve()) for c in opt_cfg.config_files]}
        jobs.append(Job(n, "aka.convert.batch:convert_one", kw, gpus=opt_cfg.gpus, timeout_s=opt_cfg.timeout_s))
    skipped = [i for i in items.values() if i.state == "skipped"]
    log(f"{len(jobs)} operator(s) to convert, {len(skipped)} done before (skipped) -> {lib.root}")
    done = [0]

    def on_result(res: JobResult) -> None:
        state = lib.record(res.id, res, paths[res.id], model=opt_cfg.model, share=shares.get(res.id))
        st = lib.status(res.id) or {}
        items[res.id] = BatchItem(res.id, paths[res.id], state, st.get("why", ""), res.wall_s)
        done[0] += 1
        first = (st.get("why") or "").splitlines()[0][:160] if st.get("why") else ""
        log(f"[{done[0]}/{len(jobs)}] {res.id}: {state} in {res.wall_s:.0f} s on {res.worker} - {first}")

    if jobs:
        executor.run(jobs, on_result=on_result)
    return [items[n] for n in names]


def options_json(opt: ConvertOptions) -> dict:
    return asdict(opt)

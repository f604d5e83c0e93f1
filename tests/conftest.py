"""The order the suite's work is handed out in under `pytest -n 2 --dist loadscope`
(scripts/test.sh, CI's 2 cores).

loadscope gives each test module (and each test class) whole to one worker, so module- and
class-scoped work is done once: batches of evaluations prefetched in threads (test_adversarial,
test_judge), the extracted Llama operators (test_convert_model), a built Chroma index (test_kb).
test_kb_kernels deals every kb kernel into four classes, so the heaviest file spreads over both
workers. (xdist's `loadgroup` would group by mark instead, but pytest-xdist 3.8 names the group by
rewriting `item._nodeid`, which pytest 9 no longer reads: its groups are silently ignored.)

On the workers, scopes are sorted heaviest first and `--no-loadscope-reorder` keeps that order:
xdist's own reorder goes by test count, which put modules of a few tests and several minutes
last and left one worker idle at the end. The two modules that start a local Ray head may land on
different workers; each then starts its own (a head picks free ports; seen side by side here).
"""
from __future__ import annotations

import os

# Heaviest first, by each scope's seconds on the 2-core machine (pytest --durations, summed per scope,
# 2026-12-03 after the CPU evaluations stopped importing torch._dynamo). Every scope of more than a few
# seconds is listed: one left to the alphabetical tail (test_dispatch, ~60 s) kept a worker busy
# while the other had nothing left. An evaluation on the CPU costs ~5 s of CPU, most of it two
# fresh interpreters importing torch.
HEAVY = ("test_kb_kernels.py::TestChunk1", "test_kb_kernels.py::TestChunk0", "test_kb_kernels.py::TestChunk2",
         "test_kb_kernels.py::TestChunk3", "test_agent_e2e.py", "test_adversarial.py", "test_exp_e2e.py",
         "test_convert_batch.py", "test_bench_run.py", "test_convert_model.py", "test_dispatch.py",
         "test_judge.py", "test_outlier_band.py", "test_peers.py", "test_harness.py", "test_gemm_dispatch.py",
         "test_cli.py", "test_kb.py", "test_problem.py", "test_exp_arms.py", "test_plots.py", "test_executors.py",
         "test_moe_dispatch.py", "test_attn_dispatch.py", "test_collect_runs.py", "test_llm.py",
         "test_gpulock.py", "test_bench.py", "test_interp_fix.py", "test_kb_kernels.py")


def _scope(item) -> str:
    """xdist's loadscope unit: the module, or module::Class for a test method."""
    parts = item.nodeid.split("::")
    return "::".join(parts[:2]) if item.cls is not None else parts[0]


def _rank(scope: str) -> int:
    for i, name in enumerate(HEAVY):
        if scope.endswith("/" + name) or scope == name:
            return i
    return len(HEAVY)


def pytest_collection_modifyitems(config, items):
    if "PYTEST_XDIST_WORKER" not in os.environ:  # a plain run keeps pytest's order
        return
    order = {id(it): n for n, it in enumerate(items)}
    # Every scope's tests stay together and in collection order, so its fixtures are set up once.
    items.sort(key=lambda it: (_rank(_scope(it)), _scope(it), order[id(it)]))

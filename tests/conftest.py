"""How the suite splits over `pytest -n 2 --dist loadgroup` (scripts/test.sh, CI's 2 cores).

A test module is one xdist group, so it runs whole on one worker and its module- and session-
scoped work is done once: batches of evaluations prefetched in threads (test_adversarial,
test_judge), the extracted Llama operators (test_convert_model), a built Chroma index (test_kb).
A module may split itself by marking its tests with their own `xdist_group` (test_kb_kernels
deals its 69 kernels into chunks). The two modules that start a Ray head share one group, so the
session's one local cluster (tests/fakes/ray_cluster.py) is started once.

Under xdist, the groups are handed out heaviest first (`--no-loadscope-reorder` keeps this order;
xdist's own reorder goes by test count, which put 3-test modules of several minutes last and left
one worker idle at the end). Without xdist nothing is reordered.
"""
from __future__ import annotations

import pytest

SHARED_GROUPS = {"test_executors": "ray", "test_convert_batch": "ray"}

# Heaviest first: CPU seconds of each group, measured on the shared 2-core machine
# (pytest --durations, tests/conftest.py's order being the only input to scheduling).
HEAVY = ("kb_kernels_0", "kb_kernels_1", "kb_kernels_2", "kb_kernels_3", "test_adversarial", "ray",
         "test_convert_model", "test_exp_e2e", "test_agent_e2e", "test_judge", "test_exp_arms", "test_problem",
         "test_agent", "test_kb", "test_cli", "test_harness", "test_offline_sweep", "test_bench_run")


def _group(item) -> str:
    mark = item.get_closest_marker("xdist_group")
    if mark:
        return mark.args[0] if mark.args else mark.kwargs["name"]
    module = item.module.__name__.rsplit(".", 1)[-1]
    return SHARED_GROUPS.get(module, module)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    if getattr(config.option, "dist", "no") != "loadgroup":
        return
    rank = {g: i for i, g in enumerate(HEAVY)}
    order = {id(it): n for n, it in enumerate(items)}
    # Each group's tests stay contiguous and in collection order, so module fixtures are set up once.
    items.sort(key=lambda it: (rank.get(_group(it), len(HEAVY)), _group(it), order[id(it)]))

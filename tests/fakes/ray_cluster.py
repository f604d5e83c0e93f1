"""One real local Ray cluster for the whole test session: a head on 127.0.0.1 with two CPUs and
two *logical* GPUs (Ray schedules `num_gpus` against them and pins CUDA_VISIBLE_DEVICES to their
ids; nothing touches a real GPU). Started once: a Ray head costs ~5-10 s on the 2-core CI box."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'aka[ray]')")
    from aka.executors import RayExecutor
    started = not ray.is_initialized()
    ex = RayExecutor(address="local", init_kwargs={"num_cpus": 2, "num_gpus": 2, "_node_ip_address": "127.0.0.1"})
    ex._ray()
    yield ray
    if started:
        ray.shutdown()

"""GPU acceptance for the measurement layer: stable timing, known answers, baselines on 3 ops."""
import pytest
import torch

from aka.evaluate.api import EvalConfig, evaluate
from tests.gpu.conftest import kernel, problem


def _eval(prob, cand, shapes, **kw):
    return evaluate(prob, cand, shapes=shapes, config=EvalConfig(device="cuda", fresh_baselines=True, **kw))


@pytest.mark.parametrize("shape", [(32, 4096), (4096, 4096), (32768, 8192)])
def test_same_kernel_timed_twice_agrees(shape, record):
    """Two Impl objects of one kernel, interleaved in one ShapeTimer: medians within 2% above
    100 us and within 5% below."""
    from aka.evaluate.loader import import_file
    from aka.evaluate.stats import median_ci
    from aka.evaluate.timing import Impl, ShapeTimer
    mod = import_file(kernel("rms_norm"), "_t_rms")
    model = mod.ModelNew(1e-6)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    per = shape[0] * shape[1] * 2 * 2
    n_sets = 1 if per >= 3 * l2 else min(256, -(-3 * l2 // per))
    sets = [{"x": torch.randn(*shape, device="cuda", dtype=torch.bfloat16),
             "weight": torch.randn(shape[1], device="cuda", dtype=torch.bfloat16)} for _ in range(n_sets)]
    a, b = Impl("a", model), Impl("b", model)
    ShapeTimer([a, b], sets, l2).run()
    ma, mb = median_ci(a.samples)[0], median_ci(b.samples)[0]
    spread = abs(ma - mb) / min(ma, mb)
    limit = 0.02 if min(ma, mb) > 100 else 0.05
    record("repeatability", shape=shape, a_us=ma, b_us=mb, spread=spread, limit=limit, method=a.method,
           n=len(a.samples))
    assert spread <= limit, f"{shape}: {ma:.3f} vs {mb:.3f} us ({spread:.1%} > {limit:.0%})"


def test_one_timing_method_per_shape_and_a_syncing_call_says_so(record):
    """The method is the shape's: every capturable implementation of a shape with several input
    sets is graph-timed (timing v4; v3 picked it per implementation from a host-sensitive
    estimate, and timed 102 of 166 short torch.compile baselines with events against graph-timed
    candidates). A call that syncs with the host is found before any capture, timed with events,
    and says so; a shape whose inputs fill 3x the L2 is event-timed for every implementation."""
    import torch.nn as nn

    from aka.evaluate.timing import Impl, ShapeTimer

    class Plain(nn.Module):
        def forward(self, x):
            return x * 2 + 1

    class Syncs(nn.Module):
        def forward(self, x):
            return x + x[x > 10].numel()  # the boolean mask's nonzero waits for the GPU

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    small = [{"x": torch.randn(64, 4096, device="cuda")} for _ in range(8)]
    impls = [Impl("plain", Plain()), Impl("compiled", torch.compile(Plain())), Impl("syncs", Syncs())]
    ShapeTimer(impls, small, l2).run()
    plain, compiled, syncs = impls
    record("method_per_shape", methods={i.name: i.method for i in impls}, note=syncs.note)
    assert plain.method == compiled.method == "cuda_graph"
    assert syncs.method == "cuda_events" and "synchronizes" in syncs.note and syncs.samples
    big = [{"x": torch.randn(3 * l2 // 4 + 1024, device="cuda")}]  # fp32: past 3x the L2, one set
    impls = [Impl("plain", Plain()), Impl("compiled", torch.compile(Plain()))]
    ShapeTimer(impls, big, l2).run()
    assert all(i.method == "cuda_events" and i.samples for i in impls)


def test_a_slow_call_is_graphed_over_few_sets_and_measures_what_events_measure(record):
    """A 5 ms call on 256 small input sets: a replay over every set would last 1.3 s and its 25
    samples 32 s of exclusive hold (a 14 ms kernel held the GPU 288 s in session 7's kb verify).
    The graph holds ceil(20 ms / 5 ms) = 4 sets instead, the rounds take seconds, and the time per
    call agrees with the same call timed with events."""
    import time

    import torch.nn as nn

    from aka.evaluate.timing import GRAPH_MAX_US, Impl, ShapeTimer

    cycles = 10_000_000  # ~5 ms at the H200's 1.98 GHz; the test holds at any clock

    class Slow(nn.Module):
        def forward(self, x):
            torch.cuda._sleep(cycles)
            return x + 1

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    sets = [{"x": torch.randn(16, 16, device="cuda")} for _ in range(256)]
    graphed, events = Impl("graphed", Slow()), Impl("events", Slow(), capturable=False)
    t0 = time.monotonic()
    ShapeTimer([graphed, events], sets, l2).run()
    wall = time.monotonic() - t0
    g, e = sorted(graphed.samples)[len(graphed.samples) // 2], sorted(events.samples)[len(events.samples) // 2]
    record("slow_call_graph", graph_calls=graphed.graph_calls, graphed_us=g, events_us=e, wall_s=wall,
           methods=[graphed.method, events.method])
    assert graphed.method == "cuda_graph" and events.method == "cuda_events"
    assert 1 < graphed.graph_calls <= GRAPH_MAX_US / (0.5 * e) + 1
    assert abs(g - e) / e < 0.03, (g, e)
    assert wall < 15, wall


def test_known_answer_copy_iou(record):
    res = _eval(problem("copy"), kernel("copy"), "large,medium", baselines=False)
    assert res.status == "pass", res.reason
    for s in res.shapes:
        record("known_copy", shape=s.id, time_us=s.time_us, iou=s.iou, sol_fraction=s.sol_fraction,
               method=s.timing_method, host_us=s.host_us, head_start_us=s.head_start_us)
    large = next(s for s in res.shapes if s.id == "large")
    assert 0.8 <= large.iou <= 1.0, large.iou
    # one event-timed shape (512 MB): the result says how long a call took on the host and what spin it ran behind
    assert large.timing_method == "cuda_events" and large.host_us > 0 and large.head_start_us >= 100
    medium = next(s for s in res.shapes if s.id == "medium")
    assert medium.timing_method != "cuda_events" or medium.host_us is not None


def test_an_honest_host_bound_candidate_is_timed_on_the_gpu_and_passes_the_judges_clock(record):
    """copy_chunked: copy.py's work in 200 launches, a host path of milliseconds on the 1 GB (one-set,
    event-timed) shape. Through judge and runner it passes: the runner's samples ran behind a spin
    sized to the host path, and the judge's clock checked them on a replay of a one-call graph (an
    eager checked call would carry the host path the samples left out, and fail the clock). Its time
    is its 200 kernels' GPU time and the gaps between them, well under its host path, and no
    host-bound note is given. (On an H100, 2026-12-07: 1287 us against a 3236 us host path, 1009 us
    in its kernels by the profiler, copy.py 708 us: 200 small launches cost the GPU more than one.)"""
    plain = _eval(problem("copy"), kernel("copy"), "large", baselines=False)
    chunked = _eval(problem("copy"), kernel("copy_chunked"), "large", baselines=False)
    p, c = plain.shapes[0], chunked.shapes[0]
    prof = sum(k["us"] for k in (c.profile or []) if k.get("kind") == "own")
    record("host_bound_candidate", status=chunked.status, reason=chunked.reason[:300], plain_us=p.time_us,
           chunked_us=c.time_us, host_us=c.host_us, head_start_us=c.head_start_us, method=c.timing_method,
           notes=[n for n in chunked.notes if "host" in n], plain_host_us=p.host_us, kernels_us=prof)
    assert plain.status == "pass" and chunked.status == "pass", (plain.reason, chunked.reason)
    assert c.timing_method == "cuda_events" and c.host_us > 1000 and c.head_start_us > c.host_us
    assert c.time_us < 0.6 * c.host_us                        # the GPU's time, not the host path's
    assert prof and 0.95 * prof <= c.time_us <= 1.5 * prof + 100
    assert not any("host-bound timing" in n for n in chunked.notes)


def test_known_answer_slow_kernel(record):
    res = _eval(problem("copy"), kernel("copy_slow"), "slow", baselines=False)
    assert res.status == "pass", res.reason
    s = res.shapes[0]
    record("known_slow", shape=s.id, time_us=s.time_us, iou=s.iou, sol_fraction=s.sol_fraction)
    assert s.sol_fraction < 0.02, s.sol_fraction


def test_known_answer_matmul_mfu(record):
    """cuBLAS (the eager reference) on 8192^3 bf16: MFU against the datasheet in [0.6, 1.0]."""
    res = _eval(problem("matmul_8192"), kernel("matmul"), "8192")
    assert res.status == "pass", res.reason
    s = res.shapes[0]
    peak = res.env["ceilings"]["datasheet"]["peak_tflops"]["bf16"]
    eager_mfu = s.flops["bf16"] / (s.eager_us * 1e6) / peak
    record("known_matmul", time_us=s.time_us, candidate_mfu=s.mfu, eager_us=s.eager_us, eager_mfu=eager_mfu,
           compile_us=s.compile_us)
    assert 0.6 <= eager_mfu <= 1.0, eager_mfu
    assert s.mfu is not None and 0.0 < s.mfu <= 1.0


@pytest.mark.parametrize("op,shapes", [("rms_norm", "1,9,14"), ("silu_and_mul", "1,9,14"), ("softmax", "1,6,13")])
def test_eager_compile_candidate(op, shapes, record):
    res = _eval(op, kernel(op), shapes)
    assert res.status == "pass", res.reason
    for s in res.shapes:
        record("three_ops", op=op, shape=s.id, label=s.label, time_us=s.time_us, ci=s.time_ci_us,
               method=s.timing_method, eager_call_us=s.eager_call_us, eager_us=s.eager_us,
               compile_us=s.compile_us, speedup_eager=s.speedup_eager, speedup_compile=s.speedup_compile,
               sol_fraction=s.sol_fraction, iou=s.iou, bound=s.bound, gpu=res.env.get("gpu"),
               clocks=res.env.get("clocks"), wall=res.wall_s)
        assert s.time_us and s.eager_us and s.compile_us
        assert not s.impossible


def test_parallel_evaluations_measure_what_one_alone_measures(record):
    """The GPU lock's promise (aka/evaluate/gpulock.py): evaluations run at once overlap their
    checks but never their timed rounds, so each measures what it would measure alone. One
    evaluation alone, then four of the same kernel at once: every shape's median within 5% (2%
    above 100 us) of the solo run, and the waits prove that the timings took turns."""
    from concurrent.futures import ThreadPoolExecutor
    shapes = "1,9,14"

    def one():
        return evaluate("rms_norm", kernel("rms_norm"), shapes=shapes,
                        config=EvalConfig(device="cuda", baselines=False))

    solo = one()
    assert solo.status == "pass", solo.reason
    with ThreadPoolExecutor(4) as pool:
        many = list(pool.map(lambda _: one(), range(4)))
    assert all(r.status == "pass" for r in many), [r.reason for r in many]
    waits = [r.wall_s.get("gpu_wait_s", 0.0) for r in many]
    base = {s.id: s.time_us for s in solo.shapes}
    for r in many:
        for s in r.shapes:
            limit = 0.02 if base[s.id] > 100 else 0.05
            spread = abs(s.time_us - base[s.id]) / base[s.id]
            record("parallel", shape=s.id, solo_us=base[s.id], parallel_us=s.time_us, spread=spread, limit=limit,
                   gpu_wait_s=r.wall_s.get("gpu_wait_s", 0.0), total_s=r.wall_s.get("total_s"))
            assert spread <= limit, f"shape {s.id}: {s.time_us:.2f} us in parallel vs {base[s.id]:.2f} alone"
    assert sum(w > 0 for w in waits) >= 1, f"no evaluation ever waited for the GPU: {waits}"


def test_a_host_bound_call_is_timed_behind_a_spin_that_covers_it_and_one_past_the_cap_is_said_to_be(record):
    """One input set over 3x the L2 (events). A call that sleeps 2 ms on the host before a short
    copy outran the fixed ~200 us head start (until 2026-12-07 it was timed at 1854 us, the copy's
    103 us plus the host's excess, on an H100): prepare now sizes its spin to its host path, so it
    is timed at the copy's GPU time, with no note. A call sleeping 12 ms, past the 10 ms cap, is
    still host-bound and its result says so; the plain copy keeps the fixed spin and gets no note."""
    import time as _time

    from aka.evaluate.stats import median_ci
    from aka.evaluate.timing import HEAD_START_CYCLES, Impl, ShapeTimer, head_start_us, host_bound_note

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    n = (3 * l2) // 2 + 1024
    sets = [{"x": torch.randn(n, device="cuda", dtype=torch.bfloat16)}]

    class SlowHost(Impl):
        def __init__(self, name, sleep_s):
            super().__init__(name, None)
            self.sleep_s = sleep_s

        def __call__(self, inputs):
            _time.sleep(self.sleep_s)
            return inputs["x"] * 2

    slow, past, fast = SlowHost("slow", 0.002), SlowHost("past_cap", 0.012), Impl("fast", lambda x: x * 2)
    ShapeTimer([slow, past, fast], sets, l2).run()
    hs = head_start_us()
    med = {i.name: median_ci(i.samples)[0] for i in (slow, past, fast)}
    notes = {i.name: host_bound_note(i.host_us, i.head_us, med[i.name]) for i in (slow, past, fast)}
    record("host_bound_sized", head_start_us=hs, **{f"{k}_us": v for k, v in med.items()},
           **{f"{i.name}_host_us": sorted(i.host_us)[len(i.host_us) // 2] for i in (slow, past, fast)},
           **{f"{i.name}_spin_us": max(i.head_us) for i in (slow, past, fast)}, notes=notes)
    assert slow.method == past.method == fast.method == "cuda_events"
    assert fast.spin_cycles == HEAD_START_CYCLES and notes["fast"] is None
    assert max(slow.head_us) > 2000 and notes["slow"] is None
    assert med["slow"] < 1.3 * med["fast"] + 20          # the copy's GPU time, not the host's 2 ms
    assert med["past_cap"] > 1500 and notes["past_cap"] and "host-bound timing" in notes["past_cap"]

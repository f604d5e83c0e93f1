"""GPU timing inside the worker: cold L2, many samples, medians with 95% CIs, interleaved.

Two methods, chosen per shape (the same for every implementation of the shape) from the size of
its inputs:
  * cuda_graph (inputs under 3x the L2, so several input sets): a CUDA graph holding G
    back-to-back calls, each on a different input set, the sets together at least 3x the L2, so
    inputs are evicted before they are reused; one sample is one replay divided by G. Launch
    overhead (2-5 us per call measured on the H200, shared/anchors) would otherwise be most of
    what a decode-sized kernel is "timed" at. Its un-graphed per-call time is reported too
    (`eager_call_us`), since serving without graphs pays it. A call slow enough that a replay
    over every set would run past GRAPH_MAX_US is graphed over fewer sets, where a warm L2 can
    be worth under 1% of it (`graph_sets`).
  * cuda_events (inputs of 3x the L2 or more: one set, a call moving >= ~150 MB on an H200, tens
    of us at least): every sample is one call between two CUDA events, after a read over a buffer
    of 2x the L2, so the inputs come from HBM, as in a serving step, and a head start on the GPU (a
    spin, ~200 us, longer for a call whose host path needs it: head_start_cycles) so the call's
    launches are all enqueued before the start event fires.
An implementation that cannot be captured (a reference that syncs with the host) is timed with
events and the result says so. Until v4 the method was chosen per implementation from a warm-up
estimate, which a busy host could push over the threshold: on the H200, 102 of 166 short
torch.compile baselines were timed with events against candidates timed with graphs, and a
speedup over compile then measured the method as much as the kernel.
Candidate, eager reference and torch.compile(reference) are sampled in rounds, A B C A B C ..., with
the order rotated every round, so a clock drift or a thermal step hits all of them alike.
"""
from __future__ import annotations

import contextlib
import math
import threading
import time

import torch

from aka.evaluate.loader import call
from aka.evaluate.result import StageFailure

ROUNDS = 5
TARGET_MS_PER_IMPL = 60.0      # measured time per implementation per shape, all rounds together
MIN_SAMPLES, MAX_SAMPLES = 25, 400
MAX_SETS = 256
EAGER_CALLS = 32  # calls per repetition of the un-graphed per-call measurement (eager_call_us)
# v2: torch.compile per shape after dynamo.reset (a fresh process's compile), warm-up over every
# input set outside the GPU lock, the per-call estimate one call per head start (v1 compiled
# later shapes of a worker with automatic dynamic shapes, could recompile inside timed samples,
# and could pick the method from a host-bound estimate). v3: the input sets share one pattern of
# control values (integer tensors) and timed rounds refresh only floating-point values, so a
# value-dependent reference compiles once and never inside a timed round. v4: the method is the
# shape's, not each implementation's (see the top of this file).
# Not a new version: the head start sized to a call's host path (2026-12-07) times every call whose
# host path is under ~100 us (1.5x it + 50 us inside the fixed spin) cycle for cycle as before; one
# between that and the fixed spin gets a longer spin where the GPU was already never waiting, so the
# same figure; only a call that outran the fixed spin measures differently: its earlier figure was
# partly the host's (from 2026-12-07 such records carry the `host-bound timing` note).
BASELINE_METHOD = "v4"
BEAT_S = 5.0  # progress heartbeat while compiling (the sandbox's idle watchdog waits 180 s)


def _tensors_bytes(inputs: dict) -> int:
    return sum(t.numel() * t.element_size() for t in inputs.values() if isinstance(t, torch.Tensor))


# One graph replay of a slow call over every input set is long: moe_align_block_size's
# single-program kernel (14 ms a call) over 256 sets replayed for 3.6 s, and its 25 samples held
# the GPU's exclusive lock for 288 s of one H200 kb verify (2026-11-30), every other job waiting. A
# graph holds fewer sets (replays of about GRAPH_MAX_US) only where that cannot move the result:
# all the L2 can give a call is its inputs without the trip to HBM, at most
# 2 x (bytes of one set) / HBM_FLOOR_BPS, and that must stay under L2_BIAS of the call's time.
GRAPH_MAX_US = 20_000.0
L2_BIAS = 0.01
HBM_FLOOR_BPS = 1.0e12  # below the HBM bandwidth of every datacenter GPU: the bound errs large


def graph_sets(n_sets: int, call_us: float, set_bytes: int) -> int:
    """How many of `n_sets` input sets one graph holds for a call of `call_us` GPU microseconds."""
    if n_sets <= 1 or n_sets * call_us <= GRAPH_MAX_US:
        return n_sets
    if 2.0 * set_bytes / HBM_FLOOR_BPS * 1e6 > L2_BIAS * call_us:
        return n_sets  # a warm L2 could be worth more than L2_BIAS of the call: every set, cold
    return max(1, min(n_sets, math.ceil(GRAPH_MAX_US / call_us)))


class Impl:
    def __init__(self, name: str, model, capturable: bool = True):
        self.name, self.model, self.capturable = name, model, capturable
        self.method = None
        self.samples: list[float] = []
        self.host_us: list[float] = []  # event-timed samples: each call's host time (host_bound_note)
        self.spin_cycles = HEAD_START_CYCLES  # the head start before each event-timed sample (head_start_cycles)
        self.head_us: list[float] = []  # event-timed samples: the head start each had, us (beside host_us)
        # The candidate in its runner: its spin may grow only with a graph of one call for the judge's
        # checked call (ShapeTimer._may_extend), whose clock must see GPU time, not host time.
        self.check_graph_wanted = False
        self.extendable = False  # prepare found its spin may grow (_may_extend): later rounds may raise it too
        self.check_graph = None
        self.check_outs = None
        self.eager_call_us = None
        self.graph = None
        self.graph_calls = 1
        self.graph_outs = None
        self.error = None
        self.note = None  # said in the result, not an error (e.g. timed with events: not capturable)
        self.last_out = None  # (input-set index, output) of a call made inside the timed region
        self.warmed = False

    def __call__(self, inputs):
        return call(self.model, inputs)


class RemoteImpl(Impl):
    """The candidate as the judge sees it: its runner calls, warms, prepares and samples it, and
    every number it returns is a claim until the checked call agrees (_check_timed_output)."""

    def __init__(self, client):
        super().__init__("candidate", None)
        self.client = client

    def ask(self, op: str, **kw) -> dict:
        from aka.evaluate.result import StageFailure
        r = self.client.request(op, "timing", **kw)
        if not r.get("ok"):
            raise StageFailure(r.get("status", "runtime_error"), r.get("reason") or f"{op} failed", "timing")
        return r


# A spin on the GPU before each timed region, so the host has enqueued the work by the time the
# start event fires: without it an idle GPU waits for Python's launch (measured on the H200 here:
# a 3 us RMSNorm timed at 36 us, the host's launch rate). ~200 us at 1.98 GHz: room for ~5 launches.
HEAD_START_CYCLES = 400_000
# A call whose host path outruns that spin gets a longer one, sized to its measured host path
# (head_start_cycles): HOST_COVER times it plus HOST_SLACK_US, so a busier host in a later round
# still finds the GPU spinning; at most MAX_HEAD_START_US, past which the result says the timing is
# host-bound. A call inside the fixed spin keeps it, cycle for cycle: its figures are what they were.
HOST_COVER = 1.5
HOST_SLACK_US = 50.0
MAX_HEAD_START_US = 10_000.0
HEAD_START_RULE = "host-sized-1"  # in the baseline cache's key (timed.py)


def _head_start(cycles: int = HEAD_START_CYCLES) -> None:
    torch.cuda._sleep(int(cycles))


_HEAD_START_US: list[float] = []


def head_start_us() -> float:
    """The head start's GPU duration here (median of five, measured once per process): the host
    time a call can take before an event-timed sample starts to measure the host."""
    if not _HEAD_START_US:
        _HEAD_START_US.append(sorted(_event_time_us(_head_start, 1, False) for _ in range(5))[2])
    return _HEAD_START_US[0]


def head_start_cycles(host_us: float | None) -> int:
    """The spin before each event-timed sample of a call whose host path takes `host_us`: the fixed
    HEAD_START_CYCLES while HOST_COVER x host_us + HOST_SLACK_US fits in it, else that many
    microseconds of spin (at most MAX_HEAD_START_US)."""
    if not host_us or not math.isfinite(host_us):
        return HEAD_START_CYCLES
    need = min(HOST_COVER * host_us + HOST_SLACK_US, MAX_HEAD_START_US)
    if need <= HEAD_START_CYCLES / 4000.0:  # inside the fixed spin at any clock up to 4 GHz: no need to ask
        return HEAD_START_CYCLES
    base = head_start_us()
    if need <= base or base <= 0:
        return HEAD_START_CYCLES
    return int(math.ceil(HEAD_START_CYCLES * need / base))


def spin_us(cycles: int) -> float:
    """A spin of `cycles` in microseconds on this GPU (head_start_us scaled)."""
    return head_start_us() * cycles / HEAD_START_CYCLES


# An event-timed sample measures the GPU only while the host keeps ahead of it: the head start gives
# the host that many microseconds to enqueue the call's launches. A call whose host path takes longer
# (Python set-up, descriptors, many launches, a busy CPU) leaves the GPU waiting on the host, and the
# sample grows by up to the excess. On an H100 host (results/h100/device-2026-12-07f,
# scripts/host_launch_probe.py) fused_moe's grouped-GEMM kernel spent 0.8-1.6 ms a call on the host and
# its torch._grouped_mm peer 1.35-2.4 ms, against a 214 us head start: events then read 1.08-1.86x the
# GPU time. So a call's spin is sized to its host path (head_start_cycles: measured in prepare, raised
# after any round whose host times outgrew it). Where even MAX_HEAD_START_US cannot cover it, or a call
# syncs with the host mid-way, the figure is partly the host's, which serving without CUDA graphs pays
# too but a GPU-side change cannot move; the result says so.
HOST_BOUND_SHARE = 0.25


def host_median(host_us: list[float]) -> float:
    """The host time a result reports for a call: the (upper) median of its event-timed samples'."""
    return sorted(host_us)[len(host_us) // 2]


def host_bound_note(host_us: list[float], head_start, median_us: float) -> str | None:
    """A result note when the call's host time outran its head start (one figure, or one per sample
    where the spin grew between rounds) by at least HOST_BOUND_SHARE of the timed median, over the
    median sample; None otherwise."""
    if not host_us or not median_us or median_us <= 0:
        return None
    heads = list(head_start) if isinstance(head_start, (list, tuple)) else [float(head_start)] * len(host_us)
    host, head = host_median(host_us), host_median(heads)
    excess = host_median([h - s for h, s in zip(host_us, heads)])
    if excess < HOST_BOUND_SHARE * median_us:
        return None
    return (f"host-bound timing: a call took {host:.0f} us on the host, {excess:.0f} us more than the "
            f"{head:.0f} us GPU head start before each timed call, against {median_us:.0f} us measured; "
            "the GPU waited on the host for up to that excess (a call that syncs with the host, or a host "
            f"path over {MAX_HEAD_START_US / 1000:.0f} ms, which no head start here covers)")


def _numbers(xs) -> list[float]:
    """A list of finite numbers from an untrusted reply, [] for anything else."""
    if not isinstance(xs, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs):
        return []
    return [float(x) for x in xs if math.isfinite(x)]


def _event_time_us(fn, n: int, head_start: bool = True, cycles: int = HEAD_START_CYCLES) -> float:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if head_start:
        _head_start(cycles)
    s.record()
    for _ in range(n):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) * 1000.0 / n


def _syncs_with_host(impl, inputs) -> bool:
    """Whether a call synchronizes with the host (`.item()`, `.tolist()`, a boolean mask's
    nonzero): torch's sync debug mode raises at the sync point, before the sync happens."""
    prev = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.no_grad():
            impl(inputs)
        return False
    except RuntimeError as e:
        if "synchroniz" in str(e):
            return True
        raise
    finally:
        torch.cuda.set_sync_debug_mode(prev)
        torch.cuda.synchronize()


class ShapeTimer:
    def __init__(self, impls: list[Impl], input_sets: list[dict], l2_bytes: int, stage=None):
        self.impls, self.sets = impls, input_sets
        # callable(round) -> callable() that writes that round's new values into the sets in place;
        # the values are made by the first call, under the shared lock (run)
        self.stage = stage
        # the shape's method: graphs where the inputs are small enough for several sets
        # (make_input_sets makes one set only from 3x the L2 up), events otherwise
        self.graphed = len(input_sets) > 1
        self.flush_buf = torch.empty(max(2 * l2_bytes, 64 << 20), dtype=torch.uint8, device="cuda")

    def flush(self):
        # Read, not write: zero_() would leave an L2 full of dirty lines whose write-back lands
        # inside the timed kernel (an 18% spread between two timings of one 20 us kernel, H200).
        torch.sum(self.flush_buf, dtype=torch.int32)

    def first_calls(self, beat=None, gpu=None) -> None:
        """Every implementation called once on every input set: torch.compile's and Triton's
        compilation (seconds of host work, a few ms of GPU work), and, for a reference whose
        control flow depends on values (MoE routing counts, sequence lengths), torch.compile's
        recompilations for the value patterns the timed rounds will meet, so none happens inside
        a timed sample. GPU work outside every lock would land inside another evaluation's timed
        region, so the calls hold the shared lock (gpulock.py), which lets go while torch.compile
        or Triton compiles (host work: seconds to minutes that would keep every other
        evaluation's timing waiting on a CPU).

        `beat` feeds the sandbox's idle watchdog every few seconds: between calls for the
        candidate (one call that hangs is still a hang), and from a thread while the trusted
        eager and torch.compile baselines run, since one compile of a large reference graph can
        outlast the watchdog."""
        last = time.monotonic()
        for impl in self.impls:
            stop = threading.Event()
            pulse = None
            if beat is not None and impl.name != "candidate":
                def pulse_loop(stop=stop):
                    while not stop.wait(BEAT_S):
                        beat()
                pulse = threading.Thread(target=pulse_loop, daemon=True)
                pulse.start()
            try:
                hold = contextlib.nullcontext() if gpu is None else gpu.shared("first_calls")
                if isinstance(impl, RemoteImpl):
                    with hold:
                        impl.ask("time_first_calls")
                    continue
                with torch.no_grad(), hold:
                    for s in self.sets:
                        impl(s)
                        if gpu is not None:
                            gpu.breathe()
                        if beat is not None and time.monotonic() - last > BEAT_S:
                            beat()
                            last = time.monotonic()
                    torch.cuda.synchronize()
            except StageFailure:
                raise
            except Exception as e:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
                impl.error = f"{type(e).__name__}: {str(e)[:200]}"
            finally:
                stop.set()
                if pulse is not None:
                    pulse.join()

    def warm(self) -> None:
        """Autotune and allocator warm-up of every implementation, under the shared GPU lock."""
        for impl in self.impls:
            if impl.error:
                continue
            if isinstance(impl, RemoteImpl):
                impl.ask("time_warm")
                impl.warmed = True
                continue
            try:
                with torch.no_grad():
                    impl(self.sets[0])
                    impl(self.sets[-1])
                torch.cuda.synchronize()
                impl.warmed = True
            except Exception as e:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
                impl.error = f"{type(e).__name__}: {str(e)[:200]}"

    def prepare(self, impl: Impl) -> None:
        if isinstance(impl, RemoteImpl):
            r = impl.ask("time_prepare")
            impl.method, impl.estimate_us = r.get("method"), float(r.get("estimate_us") or 1.0)
            impl.eager_call_us, impl.note = r.get("eager_call_us"), r.get("note")
            impl.graph_calls = max(1, int(r.get("graph_calls") or 1))
            impl.remote_graphed = r.get("method") == "cuda_graph"
            return
        if not impl.warmed:
            with torch.no_grad():
                for _ in range(3):  # compile, autotune, allocator warm-up
                    impl(self.sets[0])
            torch.cuda.synchronize()
        # GPU time per call: one call per head start, the median of three. Three calls behind one
        # head start measured the host instead whenever a call's launch path (torch.compile's
        # guards and wrapper, slower still with other workers on the CPU) outran the head start:
        # decode-sized compiled calls then "took" ms and were timed with too few samples.
        host = []

        def one():
            t0 = time.perf_counter()
            impl(self.sets[0])
            host.append((time.perf_counter() - t0) * 1e6)
        est = sorted(_event_time_us(one, 1) for _ in range(3))[1]
        cycles = head_start_cycles(host_median(host) if host else None)
        if cycles > HEAD_START_CYCLES and not self.graphed and self._may_extend(impl):
            # the host path outran the head start, so `est` was partly the host's: a head start
            # that covers it, for this estimate and for the call's event-timed samples
            impl.spin_cycles, impl.extendable = cycles, True
            est = sorted(_event_time_us(lambda: impl(self.sets[0]), 1, cycles=cycles) for _ in range(3))[1]
        # Serving without graphs pays the host's launch cost: no head start here, on purpose. At
        # most EAGER_CALLS calls over the rotating sets: a host-bound reference (a Python loop over
        # 256 sequences, say 25 ms a call) over all of up to 256 sets, three times, would hold the
        # GPU's exclusive lock for ~20 s.
        k = max(1, min(len(self.sets), EAGER_CALLS, math.ceil(GRAPH_MAX_US / max(est, 1.0))))
        impl.eager_call_us = _event_time_us(lambda: [impl(self.sets[i]) for i in range(k)], 3, False) / k
        impl.estimate_us = est
        impl.method = "cuda_graph" if (self.graphed and impl.capturable) else "cuda_events"
        if impl.method == "cuda_graph" and _syncs_with_host(impl, self.sets[0]):
            # found before a capture is tried: a sync inside a capture can leave it broken
            impl.method = "cuda_events"
            impl.note = "timed with CUDA events: it synchronizes with the host, which a CUDA graph cannot hold"
        if impl.method == "cuda_graph":
            set_bytes = _tensors_bytes(self.sets[0])
            m = graph_sets(len(self.sets), est, set_bytes)
            try:
                self._capture(impl, m)
                m_gpu = graph_sets(len(self.sets), impl.estimate_us, set_bytes)
                if m_gpu > m:
                    # the head start overstated the call (its host time): as many sets as its GPU time allows
                    impl.graph = None
                    self._capture(impl, m_gpu)
            except Exception as e:  # noqa: BLE001 - not capturable: timed with events, and said
                impl.method, impl.graph = "cuda_events", None
                impl.note = f"timed with CUDA events: graph capture failed ({type(e).__name__}: {str(e)[:120]})"
                torch.cuda.synchronize()

    def _may_extend(self, impl: Impl) -> bool:
        """Whether an event-timed call's spin may grow past the fixed head start. Not for a call that
        syncs with the host (a spin cannot keep the GPU ahead of it). For the candidate, only with a
        CUDA graph of one call on the set, which the judge's checked call replays: the judge's clock
        (check_timed_output) sees the host path of an eager call, so once the candidate's samples
        no longer carry it, an honest call whose host path is over 1.5x its GPU time would fail that
        check, and a bound that allowed for host time would let a forger hide GPU time in it. A
        candidate that cannot be captured keeps the fixed spin (and the note where it outruns it)."""
        try:
            if _syncs_with_host(impl, self.sets[0]):
                return False
            if impl.check_graph_wanted:
                impl.check_graph, impl.check_outs = self._graph_of(impl, self.sets[:1])
            return True
        except Exception:  # noqa: BLE001 - not capturable (or a sync the debug mode names otherwise): fixed spin
            impl.check_graph = impl.check_outs = None
            torch.cuda.synchronize()
            return False

    @staticmethod
    def _graph_of(impl: Impl, sets: list[dict]):
        """A CUDA graph of back-to-back calls, one on each of `sets`, replayed once, and its outputs
        (static graph memory, refreshed by each replay); nothing on `impl` is set."""
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for inp in sets[:2]:
                impl(inp)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        with torch.no_grad(), torch.cuda.graph(g):
            outs = [impl(inp) for inp in sets]
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        return g, outs

    def _capture(self, impl: Impl, m: int | None = None) -> None:
        """The timing graph: `m` back-to-back calls, on the first m input sets (all by default)."""
        sets = self.sets[:m or len(self.sets)]
        g, outs = self._graph_of(impl, sets)
        impl.graph, impl.graph_calls = g, len(sets)
        impl.graph_outs = outs  # static graph memory, one output per set: refreshed by each replay
        impl.last_out = (len(sets) - 1, outs[-1])  # static graph memory: refreshed by each replay
        # the GPU time per call from a replay: the head-start estimate can be the host's time (a
        # compiled call's guards on a busy CPU), and it sets the sample count
        impl.estimate_us = _event_time_us(g.replay, 3) / len(sets)

    def sample(self, impl: Impl, n: int) -> None:
        if isinstance(impl, RemoteImpl):
            r = impl.ask("time_sample", n=int(n))
            impl.samples += [float(x) for x in (r.get("samples") or [])][:int(n)]
            host, head = _numbers(r.get("host_us"))[:int(n)], _numbers(r.get("head_us"))[:int(n)]
            impl.host_us += host  # the runner's claims: they feed a note only
            impl.head_us += head if len(head) == len(host) else [head_start_us()] * len(host)
            return
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        with torch.no_grad():
            if impl.graph is not None:
                for i in range(n):
                    _head_start()
                    starts[i].record()
                    impl.graph.replay()
                    ends[i].record()
            else:
                k = len(self.sets)
                host = []
                for i in range(n):
                    self.flush()
                    _head_start(impl.spin_cycles)
                    starts[i].record()
                    t0 = time.perf_counter()
                    out = impl(self.sets[i % k])
                    host.append((time.perf_counter() - t0) * 1e6)
                    ends[i].record()
                impl.last_out = ((n - 1) % k, out)
                impl.host_us += host
                impl.head_us += [spin_us(impl.spin_cycles)] * n
                # a host that got slower than prepare saw (a busy CPU): the next round's spin covers it,
                # where prepare found the spin may grow (a candidate: its checked call replays a graph)
                if impl.extendable:
                    impl.spin_cycles = max(impl.spin_cycles, head_start_cycles(host_median(host)))
        torch.cuda.synchronize()
        per = impl.graph_calls if impl.graph is not None else 1
        impl.samples += [s.elapsed_time(e) * 1000.0 / per for s, e in zip(starts, ends)]

    def run(self, gpu=None) -> None:
        """The timed rounds, with new input values before each but the first (an output cache
        keyed on the input's address goes stale, and the timed-output check then catches it).

        Preparation and all rounds run in one exclusive hold. Each exclusive entry waits for
        every other evaluation's shared work to reach a breath (gpulock.py), so with 8 jobs an
        entry cost far more than a round of a short kernel (12 ms): 6 entries per shape made kb
        verify wait 100-240 s per kernel for 2 s of timing, and with 1 entry for graph-timed
        shapes but still 6 for one-set shapes, 90-230 s (H200, 2026-11-30).
        Several input sets (the graph-timed shapes): every round's new values are made first,
        under the shared lock (host work: hundreds of `make_inputs` calls) and written in place
        (GPU copies) just before their round. One set (inputs over 3x the L2): each round's
        values are made inside the hold, just before it, one round at a time, since staging
        copies of inputs that large would multiply the GPU memory of every job; `make_inputs`
        draws them on the GPU, milliseconds against the rounds' tens."""
        from aka.evaluate.gpulock import NoLock
        gpu = gpu if gpu is not None else NoLock()
        staged = None
        if self.stage is not None and len(self.sets) > 1:
            with gpu.shared("refresh"):
                staged = [self.stage(r) for r in range(1, ROUNDS)]
        live = []
        with gpu.exclusive():
            if torch.cuda.is_available():
                head_start_us()  # measured once per process, inside a hold: its spin disturbs no other timing
            for impl in self.impls:
                if impl.error and not impl.warmed:
                    continue  # failed its warm-up: reported, not timed
                try:
                    self.prepare(impl)
                    live.append(impl)
                except StageFailure:
                    raise
                except Exception as e:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
                    impl.error = f"{type(e).__name__}: {str(e)[:200]}"
            for r in range(ROUNDS):
                if r and self.stage is not None:
                    # new values, same addresses (graphs keep working)
                    (staged[r - 1] if staged is not None else self.stage(r))()
                    torch.cuda.synchronize()  # the copies finish before the round's samples start
                self._round(r, live)

    def _round(self, r: int, live: list) -> None:
        order = live[r % len(live):] + live[:r % len(live)] if live else []
        for impl in order:
            if impl.error and not impl.samples:
                continue  # failed in an earlier round: dropped, reported
            graphed = impl.graph is not None or getattr(impl, "remote_graphed", False)
            per_sample = max(impl.estimate_us, 1.0) * (impl.graph_calls if graphed else 1)
            n = int(TARGET_MS_PER_IMPL * 1000.0 / per_sample / ROUNDS)
            n = max(MIN_SAMPLES // ROUNDS, min(MAX_SAMPLES // ROUNDS, n))
            try:
                self.sample(impl, max(n, 2))
            except Exception as e:  # noqa: BLE001 - a baseline failing mid-timing loses its
                # own timing (partial samples are not a measurement), not the others'
                if impl.name == "candidate":
                    raise
                impl.error, impl.samples = f"{type(e).__name__}: {str(e)[:200]}", []


def refreshed_keys(inputs: dict, mutates=()) -> list[str]:
    """The inputs a timed round gives new values: the floating-point tensors (activations,
    weights, scales), which is enough to make a stale cached output wrong. Integer tensors
    (routing ids, sequence lengths, block tables) keep their values: they drive the control
    flow of value-dependent references, and new patterns would make torch.compile recompile
    inside a timed round (minutes, holding the GPU, and a sample that times the compiler).
    A set with no floating-point tensor refreshes its integers: something must change."""
    tensors = [k for k, t in inputs.items() if isinstance(t, torch.Tensor) and k not in mutates]
    floats = [k for k in tensors if inputs[k].is_floating_point() or inputs[k].is_complex()]
    return floats or tensors


def make_input_sets(rt, shape: dict, seed: int, l2_bytes: int, n: int | None = None, between=None) -> list[dict]:
    """Rotating input sets for timing; `between` (the GPU lock's breathe) is called after each."""
    torch.manual_seed(seed)
    first = rt.make_inputs(shape)
    per = max(1, _tensors_bytes(first))
    if n is None:
        n = 1 if per >= 3 * l2_bytes else min(MAX_SETS, math.ceil(3 * l2_bytes / per))
    sets = [first]
    # Every set shares the first set's control values (its integer tensors, where it also has
    # floating-point ones: see refreshed_keys) in storage of its own: the rotation across sets
    # keeps the L2 cold, while a value-dependent reference meets one routing / sequence-length
    # pattern, so torch.compile compiles it once rather than once per set.
    control = [k for k, t in first.items() if isinstance(t, torch.Tensor) and k not in refreshed_keys(first)]
    for i in range(1, n):
        torch.manual_seed(seed + i)
        s = rt.make_inputs(shape)
        with torch.no_grad():
            for k in control:
                if isinstance(s.get(k), torch.Tensor) and s[k].shape == first[k].shape:
                    s[k].copy_(first[k])
        sets.append(s)
        if between is not None:
            between()
    return sets



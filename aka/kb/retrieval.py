"""What every retriever reads and returns: the parent kernel's measured signals (typed, from the
harness's ShapeResult), the symptoms they show (derived here, once, for every retriever), the
`Hit`, and the `Retriever` protocol that the file retriever (file_retriever.py) and the Chroma
retriever (retriever.py) implement. The prompt's round context reads the same signals."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from aka.util import trim

if TYPE_CHECKING:
    from aka.evaluate.result import EvalResult
    from aka.problem import Problem

REASON_CHARS = 300       # a shape's failure reason in a prompt, its tail kept (util.trim)
NCU_KEYS = ("bytes_over_min", "occupancy_pct", "spill_bytes", "registers_per_thread", "dram_pct", "sm_pct")
PROFILE_KERNELS = 4      # the heaviest kernels of a shape's profile shown

# One threshold set for every retriever. A roofline floor under ~1.5 µs is below one kernel launch
# (2-4 µs on the H200 under do_bench, knowledge_base/patterns/decode-launch-amortisation): such a
# shape far from its floor is launch-bound, not bandwidth-bound.
LAUNCH_SOL_US = 1.5
LAUNCH_SOL_FRACTION = 0.5
FAR_SOL_FRACTION = 0.6   # below it a shape is "far below the roofline"
BYTES_OVER_MIN = 1.3     # DRAM bytes over the op's minimum: an extra pass over the data
LOW_OCCUPANCY_PCT = 25.0
MAX_REGISTERS = 255      # registers/thread at the hardware cap: spills follow
MIN_STALL = 1.0          # stalled warps per issued instruction for the top stall reason to become a symptom
# What a profile's largest stall reason (aka eval --ncu-stalls) says, in the notes' words, with the
# words a note's `symptoms` field would use for it. not_selected is left out: it is not a loss.
STALL_PHRASES = {
    "long_scoreboard": ("warps stalled on global memory (long scoreboard): too few bytes in flight, load latency "
                        "exposed", "long scoreboard", "bytes in flight", "latency"),
    "short_scoreboard": ("warps stalled on shared memory or special-function results (short scoreboard)",
                         "short scoreboard", "shared memory"),
    "mio_throttle": ("shared-memory instruction queue full (MIO throttle): too many shared loads per element, "
                     "byte loads, bank conflicts", "mio throttle", "shared memory", "bank conflict"),
    "lg_throttle": ("global load queue full (LG throttle): many narrow global loads instead of wide vector loads",
                    "lg throttle", "vectorized", "16-byte"),
    "wait": ("warps stalled on fixed-latency dependencies (wait): dependent instruction chains, too little ILP",
             "wait stall", "dependency"),
    "barrier": ("warps wait at barriers: work uneven between warps, or a sync per tile", "barrier", "syncthreads"),
    "math_pipe_throttle": ("a math pipe saturated (math pipe throttle): conversions or FMAs on one pipe",
                           "math pipe", "conversion"),
    "dispatch_stall": ("dispatch stalls: the pipeline could not take the selected instruction", "dispatch"),
    "no_instruction": ("instruction fetch stalls (no instruction): a loop body too large for the instruction cache",
                       "instruction cache", "unroll"),
}


@dataclass(frozen=True)
class NcuSignal:
    bytes_over_min: float | None = None
    occupancy_pct: float | None = None
    spill_bytes: float | None = None
    registers_per_thread: float | None = None
    dram_pct: float | None = None
    sm_pct: float | None = None
    stall: str | None = None               # --ncu-stalls: the largest stall reason
    stall_per_issue: float | None = None   # its stalled warps per issued instruction


@dataclass(frozen=True)
class KernelTime:
    kernel: str
    kind: str | None = None
    calls: int | None = None
    us: float | None = None


@dataclass(frozen=True)
class ShapeSignal:
    id: str = ""
    label: str = ""
    weight: float = 1.0
    correct: bool | None = None
    failed_stage: str | None = None
    reason: str = ""
    time_us: float | None = None
    sol_us: float | None = None
    sol_fraction: float | None = None
    bound: str | None = None
    iou: float | None = None
    mfu: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    small: bool = False                    # one of the op's small (CPU) shapes
    ncu: NcuSignal | None = None           # None: no usable Nsight Compute counters
    profile: tuple[KernelTime, ...] = ()
    compile: tuple[str, ...] = ()          # the offline GPU compile's lines (aka/evaluate/compile_report.py)
    compile_spill_bytes: int = 0           # its largest spill of any launch
    compile_failed: bool = False           # a launch the GPU compiler refused


@dataclass(frozen=True)
class Symptom:
    phrase: str                            # the notes' wording, a query for embedding search
    words: tuple[str, ...] = ()            # any of them in a note's `symptoms` field matches it


@dataclass(frozen=True)
class Signals:
    """The parent kernel's roofline signal: per shape, and the latest failure's text."""
    shapes: tuple[ShapeSignal, ...] = ()
    failure: str = ""

    @classmethod
    def from_result(cls, res: "EvalResult | None", weights: dict[str, float], small_ids: set[str],
                    failure: str | None = None) -> "Signals":
        return cls(tuple(shape_signal(s, weights, small_ids) for s in res.shapes) if res else (), failure or "")

    def symptoms(self) -> list[Symptom]:
        return symptoms(self)


def shape_signal(s, weights: dict[str, float], small_ids: set[str]) -> ShapeSignal:
    """One ShapeResult as the signal a prompt and a retriever read."""
    ncu = s.ncu if s.ncu and s.ncu.get("available") and not s.ncu.get("error") else None
    return ShapeSignal(
        id=s.id, label=s.label, weight=weights.get(s.id, 1.0), correct=s.correct, failed_stage=s.failed_stage,
        reason=trim(s.reason, REASON_CHARS), time_us=s.time_us, sol_us=s.sol_us, sol_fraction=s.sol_fraction,
        bound=s.bound, iou=s.iou, mfu=s.mfu, speedup_eager=s.speedup_eager, speedup_compile=s.speedup_compile,
        small=s.id in small_ids, ncu=_ncu_signal(ncu) if ncu else None,
        profile=tuple(KernelTime(str(p.get("kernel", ""))[:80], p.get("kind"), p.get("calls"), p.get("us"))
                      for p in (s.profile or [])[:PROFILE_KERNELS]),
        **_compile_fields(getattr(s, "compile", None)))


def _ncu_signal(ncu: dict) -> NcuSignal:
    """The profile's figures and its largest stall reason that costs time (not_selected does not:
    the warp was eligible and another one issued)."""
    top = next(((r, v) for r, v in (ncu.get("stalls") or {}).items() if r != "not_selected"), (None, None))
    return NcuSignal(**{k: ncu.get(k) for k in NCU_KEYS}, stall=top[0], stall_per_issue=top[1])


def _compile_fields(report: dict | None) -> dict:
    """ShapeSignal's compile fields from a ShapeResult's offline compile report."""
    from aka.evaluate.compile_report import refused_launches, summary_lines
    if not report:
        return {}
    launches = report.get("launches") or [] if report.get("available") else []
    return {"compile": tuple(summary_lines(report)),
            "compile_spill_bytes": max((lr.get("spill_bytes") or 0 for lr in launches), default=0),
            # the compiler's refusal, not a child that could not build the inputs or import the file
            "compile_failed": bool(refused_launches(report)) or "CompilationError" in str(report.get("error") or "")}


def symptoms(sig: Signals) -> list[Symptom]:
    """What the measurements show, in the phrases and words notes use for it (their `symptoms`).
    Incorrect shapes are skipped: their times say nothing about speed."""
    out: list[Symptom] = []

    def add(phrase: str, *words: str):
        if all(s.phrase != phrase for s in out):
            out.append(Symptom(phrase, words))

    for s in sig.shapes:
        if s.correct is False:
            continue
        sol = s.sol_fraction
        if sol is not None and sol < LAUNCH_SOL_FRACTION and s.sol_us is not None and s.sol_us < LAUNCH_SOL_US:
            add("launch-bound at decode shapes: sol_fraction tiny, kernel takes microseconds for little data, "
                "launch overhead", "launch")
        elif sol is not None and sol < FAR_SOL_FRACTION:
            if s.bound == "compute":
                add("compute-bound GEMM below cuBLAS, tensor cores idle waiting on loads",
                    "tflop/s", "cublas", "tensor cores")
            else:
                add("memory-bound kernel far below memory bandwidth, TB/s well under the roofline",
                    "bandwidth", "tb/s")
        ncu = s.ncu or NcuSignal()
        if (ncu.bytes_over_min or 0) > BYTES_OVER_MIN:
            add(f"dram bytes about {ncu.bytes_over_min:.1f}x the minimum: extra passes over the data", "bytes")
        if ncu.occupancy_pct is not None and ncu.occupancy_pct < LOW_OCCUPANCY_PCT:
            add("low occupancy: few resident warps per SM, registers or shared memory limit programs",
                "occupancy", "few programs")
        if ncu.spill_bytes or (ncu.registers_per_thread or 0) >= MAX_REGISTERS or s.compile_spill_bytes:
            add("register spills: n_spills > 0, local memory traffic, n_regs = 255", "spill", "n_regs = 255")
        if ncu.stall and (ncu.stall_per_issue or 0) >= MIN_STALL and ncu.stall in STALL_PHRASES:
            add(*STALL_PHRASES[ncu.stall])
    if any(s.compile_failed for s in sig.shapes):
        add("the kernel does not compile for the GPU: CompilationError from the offline sm_90a compile",
            "compilationerror", "compile error")
    fail = (sig.failure or "").strip()
    if fail:
        low = fail.lower()
        if "outlier" in low:
            add("passes on randn inputs, fails after outlier injection: overflow, fp32 accumulation", "outlier")
        elif "illegal memory access" in low or "out of bounds" in low:
            add("illegal memory access: offsets out of bounds, int32 overflow, mask on the last block",
                "illegal memory access", "int32 overflow")
        elif low.startswith("compile_error"):
            add("Triton compile error: " + fail.splitlines()[0][:200], "compile", "outofresources")
        elif low.startswith("incorrect"):
            add("output mismatch against the reference: numerics, rounding, masks on odd tails", "mismatch")
        else:
            add(fail.splitlines()[0][:200])
    return out


@dataclass(frozen=True)
class Hit:
    id: str
    title: str
    text: str
    layer: str


class Retriever(Protocol):
    def retrieve(self, problem: "Problem", signals: Signals, tried: list[str], k: int) -> list[Hit]: ...


def clip(text: str, max_chars: int) -> str:
    """A hit's text cut at a line end near `max_chars`, marked as cut."""
    if len(text) > max_chars:
        text = text[:max_chars].rsplit("\n", 1)[0] + "\n[...]"
    return text.strip()


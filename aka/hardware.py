"""GPU datasheet table, live device state, and measured calibration.

Two kinds of ceiling exist and they mean different things:

* datasheet ceilings (``SPECS``) are the vendor's peak numbers. They are the
  only ones that are true upper bounds, so the roofline floor that flags
  "impossible" times is built from them;
* measured ceilings (``calibrate``) are what a plain copy / cuBLAS matmul
  reaches on this card today. Good kernels can beat them (on our H200 a fused
  silu_and_mul moved 4.33 TB/s while the copy kernel moved 4.25 TB/s,
  shared/anchors/README.md), so they describe "attainable", never "possible".

All tensor-core rates in ``peak_tflops`` are DENSE: where a datasheet quotes
2:4-sparse rates (marked "*" on NVIDIA's sheets) they are halved here.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DTYPE_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")


@dataclass(frozen=True)
class GPUSpec:
    name: str
    arch: str
    sm_count: int
    smem_per_sm_kib: int
    max_smem_per_block_kib: int
    regs_per_sm: int
    max_threads_per_sm: int
    l2_mib: float
    mem_gib: float  # nominal capacity as the datasheet prints it ("80GB")
    mem_tbps: float  # 1 TB/s = 1e12 B/s
    # fp64: the highest FP64 rate (tensor core where there is one); fp32: plain
    # FMA, non-tensor; the rest: dense tensor-core rates. Excluded from the hash
    # because dicts are unhashable.
    peak_tflops: dict[str, float] = field(hash=False)
    source: str = ""


# Per-SM limits come from the CUDA C++ Programming Guide table "Technical
# Specifications per Compute Capability": sm_80 164/163 KiB smem per SM/block
# and 2048 threads; sm_89 100/99 KiB and 1536 threads; sm_90 and sm_100
# 228/227 KiB and 2048 threads; 64 K 32-bit registers per SM on all of them.
_HOPPER_SM = dict(arch="sm_90", smem_per_sm_kib=228, max_smem_per_block_kib=227,
                  regs_per_sm=65536, max_threads_per_sm=2048)
_AMPERE_SM = dict(arch="sm_80", smem_per_sm_kib=164, max_smem_per_block_kib=163,
                  regs_per_sm=65536, max_threads_per_sm=2048)
_ADA_SM = dict(arch="sm_89", smem_per_sm_kib=100, max_smem_per_block_kib=99,
               regs_per_sm=65536, max_threads_per_sm=1536)
_BLACKWELL_SM = dict(arch="sm_100", smem_per_sm_kib=228, max_smem_per_block_kib=227,
                     regs_per_sm=65536, max_threads_per_sm=2048)

# H100 SXM5 datasheet: FP64 34 / FP64 TC 67, FP32 67, TF32 989*, BF16/FP16 1979*,
# FP8/INT8 3958* (* = with sparsity). The H200 SXM has the same GH100 compute.
_H100_SXM_PEAKS = {"fp64": 67.0, "fp32": 67.0, "tf32": 494.5, "bf16": 989.5,
                   "fp16": 989.5, "fp8": 1979.0, "int8": 1979.0}
# A100 datasheet: FP64 TC 19.5, FP32 19.5, TF32 156 (312*), BF16/FP16 312 (624*),
# INT8 624 (1248*); no FP8 tensor cores on Ampere, so no "fp8" key.
_A100_PEAKS = {"fp64": 19.5, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0,
               "fp16": 312.0, "int8": 624.0}

SPECS: dict[str, GPUSpec] = {
    s.name: s
    for s in (
        GPUSpec(
            name="H100 SXM5 80GB", sm_count=132, l2_mib=50, mem_gib=80, mem_tbps=3.35,
            peak_tflops=dict(_H100_SXM_PEAKS),
            source="NVIDIA H100 Tensor Core GPU datasheet, SXM5 column (sparse rates halved)",
            **_HOPPER_SM),
        GPUSpec(
            name="H100 PCIe 80GB", sm_count=114, l2_mib=50, mem_gib=80, mem_tbps=2.0,
            # FP64 TC 51, FP32 51, TF32 756*, BF16/FP16 1513*, FP8/INT8 3026*
            peak_tflops={"fp64": 51.0, "fp32": 51.0, "tf32": 378.0, "bf16": 756.5,
                         "fp16": 756.5, "fp8": 1513.0, "int8": 1513.0},
            source="NVIDIA H100 Tensor Core GPU datasheet, PCIe column (sparse rates halved)",
            **_HOPPER_SM),
        GPUSpec(
            # 60 MiB L2 is what PyTorch reports on our H200 (shared/anchors/README.md).
            name="H200 SXM 141GB", sm_count=132, l2_mib=60, mem_gib=141, mem_tbps=4.8,
            peak_tflops=dict(_H100_SXM_PEAKS),
            source="NVIDIA H200 Tensor Core GPU datasheet, SXM column (sparse rates halved)",
            **_HOPPER_SM),
        GPUSpec(
            name="A100 SXM4 80GB", sm_count=108, l2_mib=40, mem_gib=80, mem_tbps=2.039,
            peak_tflops=dict(_A100_PEAKS),
            source="NVIDIA A100 Tensor Core GPU datasheet, 80GB SXM column (dense rates)",
            **_AMPERE_SM),
        GPUSpec(
            name="A100 PCIe 80GB", sm_count=108, l2_mib=40, mem_gib=80, mem_tbps=1.935,
            peak_tflops=dict(_A100_PEAKS),
            source="NVIDIA A100 Tensor Core GPU datasheet, 80GB PCIe column (dense rates)",
            **_AMPERE_SM),
        GPUSpec(
            name="L40S", sm_count=142, l2_mib=96, mem_gib=48, mem_tbps=0.864,
            # FP32 91.6, TF32 183 (366*), BF16/FP16 362.05 (733*), FP8 733 (1466*),
            # INT8 733 (1466*). The sheet gives no FP64: Ada runs it at 1/64 of FP32.
            peak_tflops={"fp64": 91.6 / 64, "fp32": 91.6, "tf32": 183.0, "bf16": 362.05,
                         "fp16": 362.05, "fp8": 733.0, "int8": 733.0},
            source="NVIDIA L40S datasheet (dense rates); fp64 = fp32/64 (Ada ratio)",
            **_ADA_SM),
        GPUSpec(
            name="GeForce RTX 4090", sm_count=128, l2_mib=72, mem_gib=24, mem_tbps=1.008,
            # Ada whitepaper, RTX 4090 column, FP32-accumulate tensor rates (what
            # PyTorch and Triton use): FP16/BF16 165.2, TF32 82.6, FP8 330.3,
            # INT8 660.6. FP16 with FP16 accumulate runs at 330.3.
            peak_tflops={"fp64": 82.6 / 64, "fp32": 82.6, "tf32": 82.6, "bf16": 165.2,
                         "fp16": 165.2, "fp8": 330.3, "int8": 660.6},
            source="NVIDIA Ada Lovelace architecture whitepaper, RTX 4090 (dense, "
                   "FP32 accumulate); fp64 = fp32/64",
            **_ADA_SM),
        GPUSpec(
            # 126 MB L2 and 148 SMs: Chips and Cheese's B200 measurements.
            name="B200", sm_count=148, l2_mib=126, mem_gib=180, mem_tbps=7.7,
            # HGX B200 per-GPU: FP64/FP64 TC 37, FP32 75, TF32 2.2 PF*, BF16/FP16
            # 4.5 PF*, FP8 9 PF*, INT8 9 POPS*.
            peak_tflops={"fp64": 37.0, "fp32": 75.0, "tf32": 1100.0, "bf16": 2250.0,
                         "fp16": 2250.0, "fp8": 4500.0, "int8": 4500.0},
            source="NVIDIA HGX B200 specification, per-GPU column (sparse rates halved)",
            **_BLACKWELL_SM),
    )
}

# Matched against the normalised name (upper case, "NVIDIA"/"GEFORCE" dropped,
# '-' and '_' as spaces). Variants with other memory or clocks (A100 40GB,
# H100/H200 NVL, RTX 4090 D) deliberately match nothing: a wrong ceiling is
# worse than none.
_NAME_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"B200( SXM\d?)?( \d+GB)?( HBM3E)?", "B200"),
    (r"H200( SXM\d?)?( 141GB)?( HBM3E)?", "H200 SXM 141GB"),
    (r"H100( SXM\d?)? 80GB( HBM3)?|H100 SXM\d?", "H100 SXM5 80GB"),
    (r"H100 PCIE( 80GB)?|H100 80GB PCIE", "H100 PCIe 80GB"),
    (r"A100 SXM4 80GB", "A100 SXM4 80GB"),
    (r"A100 80GB PCIE|A100 PCIE 80GB", "A100 PCIe 80GB"),
    (r"L40S", "L40S"),
    (r"RTX 4090", "GeForce RTX 4090"),
)


def _normalise_name(name: str) -> str:
    s = name.upper().replace("NVIDIA", " ").replace("GEFORCE", " ")
    s = re.sub(r"[-_\s]+", " ", s)
    return s.strip()


def match_spec(device_name: str) -> GPUSpec | None:
    """The spec for a device name as NVML/torch report it, or a SPECS key."""
    if device_name in SPECS:
        return SPECS[device_name]
    norm = _normalise_name(device_name)
    for key, spec in SPECS.items():
        if norm == _normalise_name(key):
            return spec
    for pattern, key in _NAME_PATTERNS:
        if re.fullmatch(pattern, norm):
            return SPECS[key]
    return None


# ---------------------------------------------------------------- device state

@dataclass
class DeviceState:
    name: str
    uuid: str | None
    driver: str | None
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    max_sm_clock_mhz: int | None
    max_mem_clock_mhz: int | None
    temperature_c: int | None
    power_w: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def read_device_state(index: int = 0, uuid: str | None = None) -> DeviceState | None:
    """Clocks, temperature and power of one GPU through NVML; None without NVML/GPU.

    ``index`` is NVML's (physical) index, which ignores CUDA_VISIBLE_DEVICES;
    pass ``uuid`` (torch's ``get_device_properties(i).uuid``) to pick the
    device CUDA is really using. Reads a driver does not support come back None.
    """
    try:
        import pynvml
    except Exception:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        if uuid is not None:
            u = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
            handle = pynvml.nvmlDeviceGetHandleByUUID(u.encode() if isinstance(u, str) else u)
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)

        def read(fn, *args):
            try:
                return fn(*args)
            except Exception:
                return None

        power_mw = read(pynvml.nvmlDeviceGetPowerUsage, handle)
        dev_uuid = read(pynvml.nvmlDeviceGetUUID, handle)
        driver = read(pynvml.nvmlSystemGetDriverVersion)
        return DeviceState(
            name=_text(pynvml.nvmlDeviceGetName(handle)),
            uuid=_text(dev_uuid) if dev_uuid is not None else None,
            driver=_text(driver) if driver is not None else None,
            sm_clock_mhz=read(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
            mem_clock_mhz=read(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM),
            max_sm_clock_mhz=read(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
            max_mem_clock_mhz=read(pynvml.nvmlDeviceGetMaxClockInfo, handle,
                                   pynvml.NVML_CLOCK_MEM),
            temperature_c=read(pynvml.nvmlDeviceGetTemperature, handle,
                               pynvml.NVML_TEMPERATURE_GPU),
            power_w=power_mw / 1000.0 if power_mw is not None else None,
        )
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


# ---------------------------------------------------------- calibration cache

def cache_dir() -> Path:
    env = os.environ.get("AKA_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "aka"


def calibration_path(gpu_name: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", gpu_name).strip("_") or "unknown"
    return cache_dir() / "calibration" / f"{slug}.json"


def load_calibration(gpu_name: str) -> dict | None:
    path = calibration_path(gpu_name)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def save_calibration(gpu_name: str, data: dict) -> Path:
    """Write atomically (temp file in the same folder, then rename)."""
    from aka.util import atomic_write_json
    return atomic_write_json(calibration_path(gpu_name), data, indent=2, sort_keys=True)


# ----------------------------------------------------------------- calibrate

def _event_times_ms(torch, fn, warmup: int, reps: int) -> list[float]:
    """One CUDA-event pair per repetition, read after a single final sync."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in pairs]


def _timing_record(times_ms: list[float], work: float, unit_scale: float) -> dict:
    med = statistics.median(times_ms)
    return {
        "median_ms": med,
        "min_ms": min(times_ms),
        "max_ms": max(times_ms),
        "reps": len(times_ms),
        "rate": work / (med * 1e-3) / unit_scale,
    }


def calibrate(device: str = "cuda", save: bool = True, copy_gib: float = 2.0,
              matmul_n: int = 8192, warmup: int = 10, reps: int = 30) -> dict:
    """Measure copy bandwidth and matmul rates on one GPU; optionally cache them.

    Returns ``copy_tbps`` (bytes read + written / median time), ``bf16_tflops``
    (2·n³ / median time, random N(0,1) operands: zeros run faster on Hopper,
    894 vs 788 TFLOP/s in one run here), ``fp8_tflops`` when
    ``torch._scaled_mm`` works, ``kernel_floor_us`` (the GPU time of one tiny kernel
    in a graph of them: the least any timed kernel can take), plus per-measurement timings, warnings and
    provenance (gpu, torch, triton, CUDA, date, clocks before and after).
    No fp32 FMA measurement: a non-tensor rate needs a purpose-built kernel.
    """
    import torch

    if copy_gib < 1.0:
        raise ValueError("copy_gib must be >= 1 so the copy dwarfs L2 and launch cost")
    dev = torch.device(device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    dev = torch.device("cuda", index)
    props = torch.cuda.get_device_properties(index)
    gpu_name = torch.cuda.get_device_name(index)
    uuid = str(getattr(props, "uuid", "")) or None
    spec = match_spec(gpu_name)

    def state() -> dict | None:
        s = read_device_state(index=index, uuid=uuid)
        if s is None and uuid is not None:
            s = read_device_state(index=index)
        return s.to_dict() if s else None

    state_before = state()
    result: dict[str, Any] = {"gpu": gpu_name, "measurements": {}, "warnings": []}
    meas = result["measurements"]

    # (a) copy: float32 random payload, bytes counted read + written.
    n_elem = int(copy_gib * 2**30) // 4
    src = torch.randn(n_elem, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    moved = 2.0 * n_elem * 4
    t = _event_times_ms(torch, lambda: dst.copy_(src), warmup, reps)
    meas["copy"] = {**_timing_record(t, moved, 1e12), "bytes": moved}
    result["copy_tbps"] = meas["copy"]["rate"]
    del src, dst

    # (b) bf16 matmul on random data.
    n = matmul_n
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    flops = 2.0 * n**3
    t = _event_times_ms(torch, lambda: torch.matmul(a, b, out=c), warmup, reps)
    meas["bf16_matmul"] = {**_timing_record(t, flops, 1e12), "n": n}
    result["bf16_tflops"] = meas["bf16_matmul"]["rate"]

    # (c) fp8 e4m3 through _scaled_mm: A row-major, B column-major, tensor-wise
    # fp32 scales of 1 (randn stays far inside e4m3's ±448).
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if hasattr(torch, "_scaled_mm") and fp8 is not None and props.major * 10 + props.minor >= 89:
        try:
            a8 = a.to(fp8)
            b8 = b.t().contiguous().to(fp8).t()
            one = torch.ones((), device=dev, dtype=torch.float32)
            t = _event_times_ms(
                torch, lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                                out_dtype=torch.bfloat16),
                warmup, reps)
            meas["fp8_matmul"] = {**_timing_record(t, flops, 1e12), "n": n}
            result["fp8_tflops"] = meas["fp8_matmul"]["rate"]
            del a8, b8
        except Exception as exc:  # an fp8 failure must not lose the rest
            result["warnings"].append(f"fp8 matmul failed: {type(exc).__name__}: {exc}")
    del a, b, c
    torch.cuda.empty_cache()

    # (d) the floor under any kernel as our timing sees it: a graph of K dependent one-element
    # kernels replayed back to back (v4 times short shapes as graph replays), time / K. A
    # roofline time below it (a decode shape moving a few KB) is one no kernel can reach.
    try:
        k = 200
        x = torch.zeros(1, device=dev)
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            x.add_(1)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            for _ in range(k):
                x.add_(1)
        t = _event_times_ms(torch, g.replay, warmup, reps)
        meas["kernel_floor"] = {**_timing_record(t, float(k), 1.0), "kernels_per_replay": k}
        result["kernel_floor_us"] = meas["kernel_floor"]["median_ms"] * 1e3 / k
        del g, x
    except Exception as exc:  # the floor is extra: its failure must not lose the rest
        result["warnings"].append(f"kernel floor failed: {type(exc).__name__}: {exc}")

    if spec is not None:
        checks = [("copy_tbps", spec.mem_tbps), ("bf16_tflops", spec.peak_tflops.get("bf16")),
                  ("fp8_tflops", spec.peak_tflops.get("fp8"))]
        for key, sheet in checks:
            if key in result and sheet and result[key] > sheet * 1.02:
                result["warnings"].append(
                    f"{key}={result[key]:.3g} exceeds the datasheet {sheet:.3g}: "
                    "timing or spec is wrong")
    try:
        import triton
        triton_version = triton.__version__
    except Exception:
        triton_version = None
    result["provenance"] = {
        "gpu": gpu_name,
        "spec": spec.name if spec else None,
        "uuid": uuid,
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "state_before": state_before,
        "state_after": state(),
        "method": f"CUDA events, median of {reps} after {warmup} warm-up runs",
    }
    if save:
        save_calibration(gpu_name, result)
    return result


# ------------------------------------------------------------------ ceilings

@dataclass
class Ceilings:
    mem_tbps: float
    peak_tflops: dict[str, float]
    source: str  # starts with "datasheet" or "measured"


def ceilings_for(gpu_name: str, calibration: dict | None = None
                 ) -> tuple[Ceilings, Ceilings | None]:
    """(datasheet, measured) ceilings; measured is None without a calibration.

    ``calibration`` defaults to the cached one for ``gpu_name``. Measured
    peaks: measured where measured (bf16, fp8, fp32 if present), every other
    dtype the datasheet value scaled by measured/datasheet bf16. Raises
    ValueError for a GPU not in SPECS.
    """
    spec = match_spec(gpu_name)
    if spec is None:
        raise ValueError(f"no datasheet entry for GPU {gpu_name!r}; known: {sorted(SPECS)}")
    sheet = Ceilings(spec.mem_tbps, dict(spec.peak_tflops), f"datasheet: {spec.source}")
    cal = calibration if calibration is not None else load_calibration(gpu_name)
    if not cal or "copy_tbps" not in cal:
        return sheet, None

    measured_keys = {d: cal[f"{d}_tflops"] for d in ("bf16", "fp8", "fp32")
                     if isinstance(cal.get(f"{d}_tflops"), (int, float))}
    ratio = measured_keys["bf16"] / spec.peak_tflops["bf16"] if "bf16" in measured_keys else None
    peaks: dict[str, float] = {}
    scaled: list[str] = []
    for dt, value in spec.peak_tflops.items():
        if dt in measured_keys:
            peaks[dt] = float(measured_keys[dt])
        elif ratio is not None:
            peaks[dt] = value * ratio
            scaled.append(dt)
        else:
            peaks[dt] = value
    date = cal.get("provenance", {}).get("date", "undated")
    parts = [f"measured ({date}): copy, {', '.join(sorted(measured_keys)) or 'no peaks'}"]
    if scaled:
        parts.append(f"{', '.join(scaled)} = datasheet x measured/datasheet bf16 ({ratio:.3f})")
    elif ratio is None:
        parts.append("peaks from the datasheet (no bf16 measurement)")
    return sheet, Ceilings(float(cal["copy_tbps"]), peaks, "; ".join(parts))

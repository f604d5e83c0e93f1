"""Nsight Compute: build the command, parse its raw CSV, summarise a candidate.

We run ``ncu --csv --page raw --print-units base --clock-control none
--metrics <list> -k regex:<names> <program>``. ncu replays each matched
kernel once per metric pass with caches flushed between passes (its default
``--cache-control all``), so DRAM reads are those of a cold-L2 launch.

Seen on our H200 with ncu 2025.3.1: ``--page raw`` prints 286 columns for 6 metrics
(every device__attribute_* and launch__* value besides the metrics asked
for, each with .avg/.max/.min/.sum); base units are "byte", "ns" and "%".
DRAM writes are under-counted when the output still sits in the 60 MiB L2
at kernel end (write-back): a 4096x4096 bf16 RMSNorm wrote 33.5 MB but
dram__bytes_write.sum read 10.2 MB.

Standard library only: this module may be imported inside the sandboxed worker.
"""

from __future__ import annotations

import csv
import glob
import os
import re
import shutil
import signal
import subprocess
from typing import Iterable

# Metric names as listed by Nsight Compute's Profiling Guide and
# ``ncu --query-metrics`` on Hopper.
DURATION = "gpu__time_duration.sum"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"  # achieved occupancy
REGISTERS = "launch__registers_per_thread"
LOCAL_LD = "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"  # register-spill reloads
LOCAL_ST = "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"  # register spills
L2_HIT = "lts__t_sector_hit_rate.pct"
GRID = "launch__grid_size"
BLOCK = "launch__block_size"

FOCUSED_METRICS: tuple[str, ...] = (
    DURATION, DRAM_READ, DRAM_WRITE, DRAM_PCT, SM_PCT, OCCUPANCY, REGISTERS,
    LOCAL_LD, LOCAL_ST, L2_HIT, GRID, BLOCK,
)

# Warp-state statistics (`aka eval --ncu-stalls`): per stall reason, the average number of warps
# stalled for that reason per issued instruction, so the reasons add up to the latency an issued
# instruction waits on (Nsight Compute's WarpStateStats section). A kernel whose time the counts
# of issued instructions do not explain (kernels/fp8_kv_decode_attention/f16_mma: a third fewer
# instructions, 1.19x slower on an H100) shows here what its warps wait on: long_scoreboard
# (global or local memory results), short_scoreboard (shared memory, special functions), wait
# (fixed-latency dependencies), barrier, mio_throttle / lg_throttle (memory instruction queues
# full), math_pipe_throttle (a busy pipe), dispatch_stall, no_instruction, not_selected (eligible,
# another warp issued: not a loss).
STALL_REASONS: tuple[str, ...] = (
    "long_scoreboard", "short_scoreboard", "wait", "barrier", "mio_throttle", "lg_throttle",
    "math_pipe_throttle", "dispatch_stall", "no_instruction", "not_selected",
)
ISSUE_ACTIVE = "smsp__issue_active.avg.pct_of_peak_sustained_active"   # cycles with an instruction issued


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


STALL_METRICS: tuple[str, ...] = (ISSUE_ACTIVE,) + tuple(stall_metric(r) for r in STALL_REASONS)

# Output that means the profiler cannot read counters on this machine.
# After the kill, how long to wait for the pipes to drain.
_DRAIN_S = 5.0

_UNAVAILABLE_MARKERS = ("ERR_NVGPUCTRPERM", "LibraryNotLoaded", "Failed to initialize")

# ncu prints SI-prefixed units ("Kbyte" = 1e3 bytes); with --print-units base
# everything is already byte / nsecond, and this table is the fallback.
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_TIME_TO_NS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
               "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
_BYTE_UNIT = re.compile(r"^(K|M|G|T|P|Ki|Mi|Gi|Ti)?(byte)(/second)?$")
_METRIC_COL = re.compile(r"^[a-z0-9]+__[A-Za-z0-9_.]+$")
_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d*)?([eE][+-]?\d+)?$|^[+-]?\.\d+$")


def find_ncu(path_env: str | None = None) -> str | None:
    """ncu on PATH, else the newest install under /opt/nvidia or CUDA's bin."""
    hit = shutil.which("ncu", path=path_env)
    if hit:
        return hit
    candidates = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")) + \
        [p for p in ("/usr/local/cuda/bin/ncu",) if os.path.exists(p)]
    return candidates[-1] if candidates else None


def ncu_command(argv: list[str], kernel_names: list[str],
                metrics: Iterable[str] = FOCUSED_METRICS, launch_skip: int = 0,
                launch_count: int | None = None, ncu: str = "ncu") -> list[str]:
    """The ncu command line profiling ``argv``; kernels matched by exact name.

    Names are regex-escaped and anchored: with ncu's default function-name
    base a Triton kernel appears under its Python function's name.
    """
    cmd = [ncu, "--csv", "--page", "raw", "--print-units", "base",
           "--clock-control", "none", "--target-processes", "all",
           "--metrics", ",".join(metrics)]
    if kernel_names:
        alternatives = "|".join(re.escape(k) for k in kernel_names)
        cmd += ["-k", f"regex:^(?:{alternatives})$"]
    if launch_skip:
        cmd += ["--launch-skip", str(int(launch_skip))]
    if launch_count is not None:
        cmd += ["--launch-count", str(int(launch_count))]
    return cmd + list(argv)


def _parse_value(raw: str) -> float | None:
    s = raw.strip()
    if not s or s.lower() in ("n/a", "na", "nan", "-"):
        return None
    if not _NUMBER.match(s):
        return None
    return float(s.replace(",", ""))


def _normalise(value: float | None, unit: str) -> tuple[float | None, str]:
    """Scale to byte, byte/second or nsecond; other units pass through."""
    u = unit.strip()
    m = _BYTE_UNIT.match(u)
    if m:
        scale = _PREFIX[m.group(1) or ""]
        return (None if value is None else value * scale), "byte" + (m.group(3) or "")
    if u in _TIME_TO_NS:
        return (None if value is None else value * _TIME_TO_NS[u]), "nsecond"
    return value, u


def parse_raw_csv(text: str, metrics: Iterable[str] | None = None) -> list[dict]:
    """Launches from ``ncu --csv --page raw`` output.

    ``metrics``: keep only these metric columns (the raw page carries hundreds
    more); None keeps every column whose name looks like a metric.

    Lines before the header (program output, ``==PROF==``/``==WARNING==``) are
    skipped; the header is the first row starting with "ID" that has a
    "Kernel Name" column; a following row with an empty ID is the units row.
    Each launch: ``{"id", "kernel", "info": {other columns}, "metrics":
    {name: float | None}, "units": {name: unit}}`` with bytes in bytes,
    durations in ns and percentages in %. "n/a" and unparsable values are None.
    """
    lines = text.splitlines()
    header_at = None
    for i, line in enumerate(lines):
        if not line.lstrip("\ufeff").startswith('"ID"'):
            continue
        row = next(csv.reader([line.lstrip("\ufeff")]), [])
        if row and row[0] == "ID" and "Kernel Name" in row:
            header_at, header = i, row
            break
    if header_at is None:
        return []
    width = len(header)
    kernel_col = header.index("Kernel Name")
    all_metric_cols = [j for j, name in enumerate(header) if _METRIC_COL.match(name)]
    wanted = None if metrics is None else set(metrics)
    metric_cols = [j for j in all_metric_cols if wanted is None or header[j] in wanted]
    info_cols = [j for j in range(width)
                 if j not in all_metric_cols and j not in (0, kernel_col)]
    units = [""] * width

    launches: list[dict] = []
    for row in csv.reader(lines[header_at + 1:]):
        if len(row) != width:
            continue  # noise printed after the header (a ==PROF== line, say)
        if row[0].strip() == "":
            units = row
            continue
        if not row[0].strip().isdigit():
            continue
        metrics: dict[str, float | None] = {}
        metric_units: dict[str, str] = {}
        for j in metric_cols:
            metrics[header[j]], metric_units[header[j]] = _normalise(_parse_value(row[j]),
                                                                     units[j])
        launches.append({
            "id": int(row[0]),
            "kernel": row[kernel_col],
            "info": {header[j]: row[j] for j in info_cols},
            "metrics": metrics,
            "units": metric_units,
        })
    return launches


def _values(launches: list[dict], name: str) -> list[tuple[float, float | None]]:
    """(value, duration_ns) for the launches where ``name`` was measured."""
    out = []
    for launch in launches:
        v = launch["metrics"].get(name)
        if v is not None:
            out.append((v, launch["metrics"].get(DURATION)))
    return out


def _weighted_mean(pairs: list[tuple[float, float | None]]) -> float | None:
    # Percentages are averaged weighted by each launch's duration so that a
    # tiny helper kernel does not count as much as the main one.
    if not pairs:
        return None
    if all(d is not None and d > 0 for _, d in pairs):
        total = sum(d for _, d in pairs)
        return sum(v * d for v, d in pairs) / total
    return sum(v for v, _ in pairs) / len(pairs)


def _sum(launches: list[dict], name: str) -> float | None:
    vals = _values(launches, name)
    return sum(v for v, _ in vals) if vals else None


def summarize_ncu(launches: list[dict], min_bytes: float | None) -> dict:
    """Totals over one candidate's launches.

    ``bytes_over_min`` = DRAM (read + write) / ``min_bytes``: 1.0 means every
    byte crossed DRAM once; well above 1 means re-reads (or a working set
    that did not fit L2). ``min_bytes`` must cover every launch profiled
    (limit ncu to one forward with launch_skip/launch_count). Below 1 is
    possible: writes still in L2 at kernel end are not counted. Percentages (dram, sm, occupancy, L2 hit) are
    duration-weighted means over launches; the L2 hit rate should strictly be
    weighted by sectors, which these metrics do not include.
    """
    read = _sum(launches, DRAM_READ)
    write = _sum(launches, DRAM_WRITE)
    duration_ns = _sum(launches, DURATION)
    regs = [v for v, _ in _values(launches, REGISTERS)]
    spill_parts = [s for s in (_sum(launches, LOCAL_LD), _sum(launches, LOCAL_ST)) if s is not None]
    moved = (read or 0.0) + (write or 0.0) if (read is not None or write is not None) else None
    kernels: dict[str, int] = {}
    for launch in launches:
        kernels[launch["kernel"]] = kernels.get(launch["kernel"], 0) + 1
    return {
        "launches": len(launches),
        "duration_us": duration_ns / 1e3 if duration_ns is not None else None,
        "dram_read_bytes": read,
        "dram_write_bytes": write,
        "bytes_over_min": moved / min_bytes if (moved is not None and min_bytes) else None,
        "dram_pct": _weighted_mean(_values(launches, DRAM_PCT)),
        "sm_pct": _weighted_mean(_values(launches, SM_PCT)),
        "occupancy_pct": _weighted_mean(_values(launches, OCCUPANCY)),
        "registers_per_thread": max(regs) if regs else None,
        "spill_bytes": sum(spill_parts) if spill_parts else None,
        "l2_hit_pct": _weighted_mean(_values(launches, L2_HIT)),
        "kernels": kernels,
        **_stalls(launches),
    }


def _stalls(launches: list[dict]) -> dict:
    """With the warp-state metrics: `issue_active_pct` and `stalls`, each reason's stalled warps per
    issued instruction (duration-weighted over launches), largest first; {} without them."""
    per = {r: _weighted_mean(_values(launches, stall_metric(r))) for r in STALL_REASONS}
    per = {r: v for r, v in per.items() if v is not None}
    if not per:
        return {}
    return {"issue_active_pct": _weighted_mean(_values(launches, ISSUE_ACTIVE)),
            "stalls": dict(sorted(per.items(), key=lambda kv: -kv[1]))}


def stall_line(summary: dict, top: int = 4) -> str | None:
    """'long_scoreboard 8.1, wait 2.3, ... per issued instruction; issue active 31%', or None."""
    stalls = summary.get("stalls") or {}
    if not stalls:
        return None
    parts = ", ".join(f"{r} {v:.1f}" for r, v in list(stalls.items())[:top])
    act = summary.get("issue_active_pct")
    return f"{parts} warps stalled per issued instruction" + (f"; issue active {act:.0f}%" if act is not None else "")


def _tail(text: str, n: int = 2000) -> str:
    return text[-n:] if len(text) > n else text


def run_ncu(argv: list[str], kernel_names: list[str], timeout_s: float,
            env: dict[str, str] | None = None, min_bytes: float | None = None,
            metrics: Iterable[str] = FOCUSED_METRICS, launch_skip: int = 0,
            launch_count: int | None = None) -> dict:
    """Profile ``argv`` under ncu and summarise the matched kernels.

    Returns ``{"available": False, "reason"}`` when ncu is missing or cannot
    read counters; ``{"available": True, "error", ...}`` when the run timed
    out or profiled no launch; else ``summarize_ncu``'s keys plus
    ``available``, ``returncode``, ``command`` and the parsed ``per_launch``.
    The child runs in its own session and its whole process group is killed
    on timeout.
    """
    metrics = list(metrics)
    ncu = find_ncu((env or os.environ).get("PATH"))
    if ncu is None:
        return {"available": False, "reason": "ncu not found on PATH"}
    cmd = ncu_command(argv, kernel_names, metrics, launch_skip, launch_count, ncu=ncu)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            out, err = proc.communicate(timeout=_DRAIN_S)
        except subprocess.TimeoutExpired:
            # a grandchild that left the group still holds the pipes: stop reading
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
            proc.wait()
            out, err = "", ""
        return {"available": True, "error": f"ncu timed out after {timeout_s} s",
                "command": cmd, "output_tail": _tail(out + err)}
    combined = out + "\n" + err
    launches = parse_raw_csv(out, metrics)
    if not launches:
        # Markers only count when nothing was profiled: a program may print
        # "Failed to initialize" about something else.
        for marker in _UNAVAILABLE_MARKERS:
            if marker in combined:
                line = next(ln.strip() for ln in combined.splitlines() if marker in ln)
                return {"available": False, "reason": line, "command": cmd}
        return {"available": True, "error": "no kernel launch matched or was profiled",
                "returncode": proc.returncode, "command": cmd,
                "output_tail": _tail(combined)}
    return {"available": True, "returncode": proc.returncode, "command": cmd,
            **summarize_ncu(launches, min_bytes), "per_launch": launches}

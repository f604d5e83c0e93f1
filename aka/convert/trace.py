"""Read a torch.profiler Chrome trace into a call tree with CPU and GPU time per ATen op.

The trace is what `prof.export_chrome_trace()` writes (a JSON object with `traceEvents`, or a
bare list; `.json.gz` too). The keys used, as torch.profiler (Kineto) writes them:

* complete events (`"ph": "X"`) with `ts`/`dur` in microseconds, on a `pid`/`tid`;
* `"cat": "cpu_op"` (older traces: `"Operator"`): ATen ops, with `args["Input Dims"]` and
  `args["Input type"]` when the profile had `record_shapes=True`, and `args["External id"]`;
* `"cat": "user_annotation"`: `record_function` ranges (ours name modules, below);
* `"cat": "python_function"`: with `with_stack=True`, including `"nn.Module: <Class>_<n>"`;
* `"cat": "cuda_runtime"` / `"cuda_driver"`: launches on the CPU thread, `args["correlation"]`;
* `"cat": "kernel"`, `"gpu_memcpy"`, `"gpu_memset"`: GPU work, `args["correlation"]` naming the
  launch and `args["External id"]` naming the op that launched it.

CPU events nest by time on their thread. A GPU kernel is charged to the innermost CPU op around
its launch (correlation -> runtime event -> enclosing op), or, without the runtime event, to the
op whose External id it carries. Time basis: GPU kernel time when the trace has kernels, else
CPU time (an op's inclusive duration: on CPU the ATen op does the work itself).
"""
from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

CPU_OP_CATS = {"cpu_op", "Operator"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset"}
# Our module ranges: "aka.module::<path>#<k>::<Class>" (k: the k-th call of that module in a forward).
MODULE_MARK = "aka.module::"
_OUR_MODULE = re.compile(r"^aka\.module::(?P<path>.*)#(?P<k>\d+)::(?P<cls>[\w.]+)$")
_STACK_MODULE = re.compile(r"^nn\.Module: (?P<cls>\w+?)_(?P<k>\d+)$")
_EPS = 1e-3  # Kineto writes ts/dur with ns resolution as float us: allow rounding at the edges


class TraceError(ValueError):
    """A trace file that cannot be read; the message is one line for the user."""


@dataclass
class Ev:
    name: str
    cat: str
    ts: float
    dur: float
    tid: tuple
    args: dict
    parent: "Ev | None" = None
    children: list["Ev"] = field(default_factory=list)
    gpu_self_us: float = 0.0   # GPU time of kernels this event launched itself

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def is_op(self) -> bool:
        return self.cat in CPU_OP_CATS

    def module(self) -> tuple[str, str, int] | None:
        """(path, class, call index) if this event is a module range."""
        if self.cat == "user_annotation":
            m = _OUR_MODULE.match(self.name)
            if m:
                return m.group("path"), m.group("cls"), int(m.group("k"))
        if self.cat == "python_function":
            m = _STACK_MODULE.match(self.name)
            if m:
                return self.name[len("nn.Module: "):], m.group("cls"), 0
        return None

    def gpu_us(self) -> float:
        return self.gpu_self_us + sum(c.gpu_us() for c in self.children)

    def dims(self) -> list:
        return list(self.args.get("Input Dims") or [])

    def types(self) -> list:
        return list(self.args.get("Input type") or [])


@dataclass
class Trace:
    roots: list[Ev]
    ops: list[Ev]          # every CPU op
    gpu_total_us: float
    kernels: int
    unattributed_gpu_us: float

    @property
    def basis(self) -> str:
        return "gpu" if self.kernels else "cpu"

    def time(self, ev: Ev) -> float:
        return ev.gpu_us() if self.basis == "gpu" else ev.dur

    def top_ops(self) -> list[Ev]:
        """CPU ops not nested in another CPU op (they may sit in annotations or modules)."""
        return [e for e in self.ops if _op_parent(e) is None]

    def total_us(self) -> float:
        if self.basis == "gpu":
            return self.gpu_total_us
        return sum(e.dur for e in self.top_ops())


def _op_parent(ev: Ev) -> Ev | None:
    p = ev.parent
    while p is not None and not p.is_op:
        p = p.parent
    return p


def nearest_module(ev: Ev) -> Ev | None:
    p = ev.parent
    while p is not None and p.module() is None:
        p = p.parent
    return p


def load_events(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace not found: {path}")
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceError(f"{path} is not a JSON trace: {e}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path} has no traceEvents list (expected torch.profiler's export_chrome_trace output)")
    return events


def build(events: list[dict]) -> Trace:
    cpu: dict[tuple, list[Ev]] = {}
    gpu: list[dict] = []
    for raw in events:
        if not isinstance(raw, dict) or raw.get("ph") != "X":
            continue
        cat = raw.get("cat") or ""
        if cat in GPU_CATS:
            gpu.append(raw)
            continue
        if cat not in CPU_OP_CATS | RUNTIME_CATS | {"user_annotation", "python_function"}:
            continue
        try:
            ev = Ev(str(raw.get("name", "")), cat, float(raw["ts"]), float(raw.get("dur", 0.0)),
                    (raw.get("pid"), raw.get("tid")), dict(raw.get("args") or {}))
        except (KeyError, TypeError, ValueError):
            continue
        cpu.setdefault(ev.tid, []).append(ev)
    roots, ops = _nest(cpu)
    total, unattributed = _attach_gpu(gpu, cpu, ops)
    return Trace(roots, ops, total, len(gpu), unattributed)


def _nest(by_thread: dict[tuple, list[Ev]]) -> tuple[list[Ev], list[Ev]]:
    roots, ops = [], []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.ts, -e.dur))
        stack: list[Ev] = []
        for ev in evs:
            # Sorted by start, so the top contains ev unless ev ends after it (it has ended, or
            # the two overlap without nesting: then ev is no child of it).
            while stack and ev.end > stack[-1].end + _EPS:
                stack.pop()
            if stack:
                ev.parent = stack[-1]
                stack[-1].children.append(ev)
            else:
                roots.append(ev)
            stack.append(ev)
            if ev.is_op:
                ops.append(ev)
    return roots, ops


def _attach_gpu(gpu: list[dict], cpu: dict[tuple, list[Ev]], ops: list[Ev]) -> tuple[float, float]:
    by_corr, by_ext = {}, {}
    for evs in cpu.values():
        for ev in evs:
            if ev.cat in RUNTIME_CATS and "correlation" in ev.args:
                by_corr[ev.args["correlation"]] = ev
    for op in ops:
        if "External id" in op.args:
            by_ext.setdefault(op.args["External id"], op)
    total = unattributed = 0.0
    for k in gpu:
        dur = float(k.get("dur", 0.0))
        total += dur
        args = k.get("args") or {}
        owner = None
        launch = by_corr.get(args.get("correlation"))
        if launch is not None:
            owner = launch.parent
            while owner is not None and not owner.is_op:
                owner = owner.parent
        if owner is None:
            owner = by_ext.get(args.get("External id"))
        if owner is None:
            unattributed += dur
        else:
            owner.gpu_self_us += dur
    return total, unattributed


def load(path: str | Path) -> Trace:
    return build(load_events(path))

"""Runtime guards inside the worker: who launched what, and did anyone touch the harness.

* `LaunchLog` wraps Triton's launch entry points (compiled and interpreted) to record every kernel
  launch by name, and marks the time spent inside a launch so ATen calls Triton makes for its own
  bookkeeping (the interpreter copies arguments) are not blamed on the candidate.
* `AtenLog` is a TorchDispatchMode active only around the candidate's forward: every ATen op the
  candidate's Python glue issues is classified as glue (allocation, views, copies, fills) or
  compute. Compute ops make the verdict `fallback`. It works on CPU and GPU alike.
* `classify_gpu_kernel` does the same for kernel names in a torch.profiler trace (GPU only), which
  also catches library calls that never pass through the dispatcher.
* `Snapshot` records the identity of the functions the harness relies on (timers, comparison,
  RNG, launch hooks) and reports any that changed after candidate code ran.
"""
from __future__ import annotations

import re
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# ATen ops a candidate may use for glue. Anything else inside its forward is compute.
GLUE_OPS = {
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "zero_", "fill_",
    "view", "_unsafe_view", "reshape", "as_strided", "expand", "permute", "transpose", "t",
    "unsqueeze", "squeeze", "select", "slice", "narrow", "split", "split_with_sizes", "chunk",
    "unbind", "view_as", "alias", "detach", "contiguous", "clone", "copy_", "lift_fresh",
    "_local_scalar_dense", "is_same_size", "resize_", "set_", "arange", "cat", "stack",
    "flatten", "unflatten", "_reshape_alias", "is_nonzero", "sym_size", "sym_stride", "sym_numel",
    "_to_copy", "to", "movedim", "view_as_real", "view_as_complex", "unsafe_split", "record_stream",
    "sym_storage_offset", "_has_compatible_shallow_copy_type", "dim", "numel", "size", "stride",
}


def aten_name(func) -> str:
    name = getattr(func, "__name__", str(func))  # e.g. "add.Tensor"
    return name.split(".")[0]


class LaunchLog:
    """Counts Triton launches by kernel name while installed."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.depth = 0
        self._orig = []

    def install(self, interpreted: bool = False):
        """Count launches. `depth` (ATen calls not blamed on the candidate) covers only Triton's
        own work: on the GPU the compiled launch and the autotuner's benchmarking; under the
        interpreter just its argument copies, since the interpreter runs kernel bodies as Python."""
        import triton.runtime.autotuner as autotuner
        import triton.runtime.jit as jit
        targets = [(jit.JITFunction, "run", True, not interpreted),
                   (autotuner.Autotuner, "run", False, True), (autotuner.Heuristics, "run", False, True)]
        if interpreted:
            import triton.runtime.interpreter as interp
            targets += [(interp.InterpretedFunction, "run", True, False),
                        (interp.GridExecutor, "_init_args_hst", False, True),
                        (interp.GridExecutor, "_restore_args_dev", False, True)]
        for cls, attr, count, mute in targets:
            orig = getattr(cls, attr)
            self._orig.append((cls, attr, orig))
            setattr(cls, attr, self._wrap(orig, count, mute))
        return self

    def _wrap(self, orig, count: bool, mute: bool):
        log = self

        def run(fn_self, *args, **kwargs):
            if count:
                name = getattr(getattr(fn_self, "fn", None), "__name__", None) or getattr(fn_self, "__name__", "?")
                log.counts[name] = log.counts.get(name, 0) + 1
            log.depth += mute
            try:
                return orig(fn_self, *args, **kwargs)
            finally:
                log.depth -= mute

        run._aka_launch_hook = True
        return run

    def reset(self):
        self.counts = {}

    def uninstall(self):
        """Restore Triton's own launchers (timing must not pay for the counting wrapper)."""
        for cls, attr, orig in self._orig:
            setattr(cls, attr, orig)
        self._orig = []


class AtenLog(TorchDispatchMode):
    """Records ATen ops issued by the candidate's own Python (not by Triton's launcher)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """False: torch leaves this class's `__torch_dispatch__` unwrapped. Its wrapper
        (torch._disable_dynamo) only keeps dynamo from tracing into the mode while dynamo compiles,
        which never happens inside a candidate's forward (the static check refuses torch.compile and
        dynamo); its first call imports torch._dynamo, 1.3 s of CPU per runner on the 2-core CI
        machine, which a CPU runner now skips (runner.serve)."""
        return False

    def __init__(self, launches: LaunchLog):
        super().__init__()
        self.launches = launches
        self.compute: dict[str, int] = {}
        self.glue: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.launches.depth == 0:
            name = aten_name(func)
            if name in GLUE_OPS and not _dtype_changing_copy(name, args, kwargs):
                self.glue[name] = self.glue.get(name, 0) + 1
            else:
                label = f"aten::{name}" + (" (dtype conversion)" if name in ("_to_copy", "copy_") else "")
                self.compute[label] = self.compute.get(label, 0) + 1
        return func(*args, **(kwargs or {}))


def _dtype_changing_copy(name: str, args, kwargs) -> bool:
    """A cast (bf16 -> fp32) is elementwise compute, not glue: `x.float()` inside forward counts."""
    kwargs = kwargs or {}
    if name == "_to_copy":
        src, dt = args[0], kwargs.get("dtype")
        return dt is not None and isinstance(src, torch.Tensor) and dt != src.dtype
    if name == "copy_" and len(args) >= 2 and isinstance(args[1], torch.Tensor):
        return args[0].dtype != args[1].dtype
    return False


# Kernel names a profiler shows for allocation/copy/fill work that glue legitimately causes.
_ALLOWED_KERNEL = re.compile(
    r"memcpy|memset|Memcpy|Memset|FillFunctor|fill_kernel|direct_copy_kernel|copy_kernel|"
    r"CatArrayBatchedCopy|arange|elementwise_kernel_with_index", re.I)
_ATEN_KERNEL = re.compile(
    r"at::native|at::cuda|cublas|cutlass|gemm|gemv|xmma|nvjet|cudnn|sm\d+_|ampere_|hopper_|"
    r"flash|softmax|reduce_kernel|void at::|splitKreduce|Kernel2", re.I)


def classify_gpu_kernel(name: str, own_kernels: set[str]) -> str:
    """'own' (the candidate's Triton kernel), 'glue' (copy/fill/memset), or 'foreign'."""
    base = name.split("(")[0].strip()
    if base in own_kernels:  # exact: a jit function named "nvjet" must not make cuBLAS "own"
        return "own"
    if _ALLOWED_KERNEL.search(name) and not re.search(r"gemm|reduce|softmax", name, re.I):
        return "glue"
    return "foreign"


def _guarded():
    import triton
    import triton.runtime.jit as jit
    items = [
        (time, "perf_counter"), (time, "perf_counter_ns"), (time, "time"),
        (torch, "manual_seed"), (torch, "randn"), (torch, "rand"), (torch, "randint"),
        (torch, "isfinite"), (torch, "isnan"), (torch, "sort"), (torch, "allclose"),
        (torch.linalg, "vector_norm"), (torch.Tensor, "abs"), (torch.Tensor, "to"),
        (torch.Tensor, "cpu"), (torch.Tensor, "clone"), (torch.Tensor, "copy_"),
        (torch.Tensor, "__sub__"), (torch.Tensor, "__ne__"), (torch.Tensor, "__eq__"),
        (torch.Tensor, "float"), (torch.Tensor, "sum"), (torch.Tensor, "max"),
        (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda, "current_stream"),
        (torch.cuda, "graph"), (torch.cuda, "CUDAGraph"), (torch.cuda.Event, "record"),
        (torch.cuda.Event, "elapsed_time"), (torch.cuda.Event, "synchronize"),
        (torch.profiler, "profile"), (jit.JITFunction, "run"), (triton, "jit"),
        (torch.Tensor, "detach"), (torch.Tensor, "view"), (torch.Tensor, "reshape"),
        (torch.Tensor, "contiguous"), (torch.Tensor, "numel"), (torch.Tensor, "is_floating_point"),
        (torch.Tensor, "__getitem__"), (torch.Tensor, "__setitem__"), (torch.Tensor, "fill_"),
        (torch.Tensor, "__mul__"), (torch.Tensor, "__gt__"), (torch.Tensor, "__le__"), (torch.Tensor, "__or__"),
        (torch.Tensor, "__and__"), (torch.Tensor, "__invert__"), (torch, "equal"), (torch, "where"),
        (torch, "argmax"), (torch.Tensor, "numpy"), (torch.Tensor, "element_size"),
    ]
    from aka.evaluate import compare as cmp
    items += [(cmp, n) for n in ("compare_outputs", "compare", "_close", "_exact", "_as_f64",
                                 "flatten_outputs", "tolerance_for", "dtype_name")]
    try:
        import triton.runtime.interpreter as interp
        items.append((interp.InterpretedFunction, "run"))
    except ImportError:
        pass
    return items


# Entries of a module's namespace that Python itself rebinds (a warning raised in the module)
_VOLATILE = frozenset({"__warningregistry__"})


def _namespaces(prefix: str = "aka.") -> list[tuple[str, dict, dict]]:
    """(name, namespace, copy, closed) of every loaded harness module and of the classes it defines:
    the names the harness's own code looks up at call time (timing.py's `torch`, a ShapeTimer
    method). A class is closed (a name added to it counts too); a module is not (importing a
    submodule adds its name). The runner imports everything it will call before the snapshot."""
    out = []
    for name, mod in list(sys.modules.items()):
        if not (name == prefix.rstrip(".") or name.startswith(prefix)) or mod is None:
            continue
        ns = vars(mod)
        out.append((name, ns, dict(ns), False))
        for attr, val in list(ns.items()):
            if isinstance(val, type) and getattr(val, "__module__", None) == name:
                out.append((f"{name}.{attr}", val.__dict__, dict(val.__dict__), True))
    return out


class Snapshot:
    """Identity of every function the harness trusts and of every name in the harness's own modules
    and classes; `changed()` lists the ones replaced (found on the H200, 2026-12-02: a candidate
    rebound `aka.evaluate.timing.torch` and its runner's samples claimed a hundredth of the time)."""

    def __init__(self):
        self.items = [(obj, attr, getattr(obj, attr, None)) for obj, attr in _guarded()]
        self.spaces = _namespaces()

    def changed(self) -> list[str]:
        out = []
        for obj, attr, ref in self.items:
            if getattr(obj, attr, None) is not ref:
                out.append(f"{getattr(obj, '__name__', type(obj).__name__)}.{attr}")
        missing = object()
        for name, ns, was, closed in self.spaces:
            for attr, ref in was.items():
                if attr not in _VOLATILE and ns.get(attr, missing) is not ref:
                    out.append(f"{name}.{attr}")
            if closed and len(ns) != len(was):  # a class gained a method (a module gains submodules)
                out += [f"{name}.{attr} (added)" for attr in ns if attr not in was]
        return out

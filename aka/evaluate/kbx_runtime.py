"""KernelBench-X tasks inside the worker: the reference function as a Module, and one shape's
inputs captured from the task's own test function (aka/kbx.py says which call is which shape).

The file's two halves are compiled from its own AST, so line numbers are the file's: the
reference half as a module; of the test half only its imports, function and class definitions and
constant assignments (its `sys.path.append(...)` lines and the module-level `test_results =
test_x()` are dropped). `from data_utils import rand_tensor, ...` binds this module's own
versions of KernelBench-X's helpers (same signatures and modes), made on the evaluation device.

To make a shape's inputs, the test function runs with the reference function replaced by a
recorder: every other call gets the reference's real result (later test code may use it), and
the call on the shape's line whose frame has the shape's loop values raises out of the test with
its arguments, cloned, bound to the reference's parameter names. The harness seeds the RNG
before each draw, so each draw is a fresh but reproducible run of the test's own tensor making.
"""
from __future__ import annotations

import ast
import inspect
import sys
import types
from pathlib import Path

import torch


class _Captured(Exception):
    def __init__(self, args, kwargs):
        super().__init__("captured")
        self.call_args, self.call_kwargs = args, kwargs


def as_outputs(x):
    """Results the comparison can judge: None -> an empty tensor (a candidate that returns a
    tensor there fails on shape), Python numbers -> 0-d tensors, containers recursively."""
    if x is None:
        return torch.empty(0)
    if isinstance(x, (bool, int, float)):
        return torch.tensor(x)
    if isinstance(x, (tuple, list)):
        return tuple(as_outputs(v) for v in x)
    if isinstance(x, dict):
        return {k: as_outputs(v) for k, v in x.items()}
    return x


class FunctionModel(torch.nn.Module):
    """A function as a Module: forward(**inputs) calls it with the inputs as keywords."""

    function = None

    def forward(self, **inputs):
        return as_outputs(type(self).function(**inputs))


def function_model(fn, name: str) -> type:
    return type(name, (FunctionModel,), {"function": staticmethod(fn)})


class _Helpers:
    """KernelBench-X's data_utils helpers (rand_tensor, rand_int, rand_bool), on `device`."""

    def __init__(self, device: str):
        self.device = device

    def rand_tensor(self, shape, *, dtype=torch.float32, device=None, mode="standard", outlier_prob=0.001,
                    outlier_scale=50.0, low=-1.0, high=1.0):
        shape = tuple(shape)
        if mode == "uniform":
            return (high - low) * torch.rand(shape, device=self.device, dtype=dtype) + low
        x = torch.randn(shape, device=self.device, dtype=dtype)
        if mode == "outlier":
            mask = torch.rand(shape, device=self.device) < outlier_prob
            x = torch.where(mask, torch.randn(shape, device=self.device, dtype=dtype) * outlier_scale, x)
        elif mode != "standard":
            raise ValueError(f"rand_tensor: unknown mode {mode!r}")
        return x

    def rand_int(self, shape, *, low, high, device=None, dtype=torch.int64):
        return torch.randint(low, high, tuple(shape), device=self.device, dtype=dtype)

    def rand_bool(self, shape, *, device=None):
        return torch.randint(0, 2, tuple(shape), device=self.device, dtype=torch.bool)


class KbxTask:
    def __init__(self, path: str | Path, meta: dict, device: str):
        self.path, self.device = str(path), device
        self.fn_name, sep = meta["function"], int(meta["separator_line"])
        tree = ast.parse(Path(path).read_text(), filename=self.path)
        self.module = types.ModuleType("_aka_reference")
        self.module.__file__ = self.path
        sys.modules["_aka_reference"] = self.module
        ref = ast.Module([n for n in tree.body if n.lineno < sep], [])
        exec(compile(ref, self.path, "exec"), self.module.__dict__)  # noqa: S102 - the reference, as import would
        self.fn = self.module.__dict__[self.fn_name]
        self.signature = inspect.signature(self.fn)
        self.ns = dict(self.module.__dict__)
        helpers = _Helpers(device)
        kept = []
        for n in (n for n in tree.body if n.lineno > sep):
            if isinstance(n, ast.ImportFrom) and n.module == "data_utils":
                for a in n.names:
                    self.ns[a.asname or a.name] = getattr(helpers, a.name)
            elif isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)) or (
                    isinstance(n, (ast.Assign, ast.AnnAssign))
                    and not any(isinstance(c, ast.Call) for c in ast.walk(n))):
                kept.append(n)
        exec(compile(ast.Module(kept, []), self.path, "exec"), self.ns)  # noqa: S102
        self.test = self.ns[meta["test"]]

    def reference_model(self) -> torch.nn.Module:
        return function_model(self.fn, "Model")()

    def capture(self, line: int, bind: dict) -> dict:
        """The inputs of the shape's call: {parameter name: value}, tensors cloned onto the device."""
        code, fn, dev = self.test.__code__, self.fn, self.device

        def recorder(*args, **kwargs):
            frame = sys._getframe(1)
            if frame.f_code is code and frame.f_lineno == line and _matches(frame.f_locals, bind):
                raise _Captured(args, kwargs)
            return fn(*(_device_arg(a, dev) for a in args), **{k: _device_arg(v, dev) for k, v in kwargs.items()})

        from aka.evaluate.loader import DeviceRedirect
        self.ns[self.fn_name] = recorder
        try:
            with DeviceRedirect(self.device):
                self.test()
        except _Captured as c:
            bound = self.signature.bind(*c.call_args, **c.call_kwargs)
            return {k: _own(v, self.device) for k, v in bound.arguments.items()}
        finally:
            self.ns[self.fn_name] = fn
        shown = ", ".join(f"{k}={v!r}" for k, v in bind.items())
        raise RuntimeError(f"{Path(self.path).name}: the call of {self.fn_name}() at line {line}"
                           f"{' with ' + shown if shown else ''} was not reached by the test function")


def _matches(local_vars: dict, bind: dict) -> bool:
    return all(_norm(local_vars.get(k, _MISSING)) == _norm(v) for k, v in bind.items())


_MISSING = object()


def _norm(v):
    return [_norm(x) for x in v] if isinstance(v, (tuple, list)) else v


def _own(v, device: str):
    """The harness's own copy: detached, cloned (two arguments never share storage), on device;
    a device argument (`logspace(0, 2, 5, device='cuda')`) names the evaluation device."""
    if isinstance(v, torch.Tensor):
        return v.detach().to(device).clone()
    if isinstance(v, (tuple, list)):
        return type(v)(_own(x, device) for x in v)
    return _device_arg(v, device)


def _device_arg(v, device: str):
    if isinstance(v, torch.device) or (isinstance(v, str) and v.split(":")[0] in ("cuda", "cpu")):
        return torch.device(device)
    return v

"""Import problems and candidates inside the worker (torch only), on any device.

Atrex-Bench's `input.py` files hard-code `device='cuda'`, and KernelBench's `get_inputs()` makes
CPU tensors. `DeviceRedirect` makes both land on the evaluation device without editing them: a
TorchFunctionMode that rewrites the `device=` of factory calls made while inputs are built.
"""
from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

_FACTORIES = {
    torch.randn, torch.rand, torch.randint, torch.randperm, torch.empty, torch.zeros, torch.ones,
    torch.full, torch.arange, torch.tensor, torch.linspace, torch.normal, torch.eye, torch.as_tensor,
    torch.empty_strided,
}
# torch.load rebuilds each tensor as an empty one on its storage's device and then sets the storage
# into it (torch/_utils.py); a redirected empty tensor would not match its storage. Factory calls
# made from these files keep their device: an input.py's `torch.load(..., map_location="cpu")` of
# recorded weights works inside the redirect, and its `.to(device)` is redirected as usual.
_KEEP_DEVICE_IN = tuple(os.path.join(os.path.dirname(torch.__file__), f) for f in ("_utils.py", "serialization.py"))


class DeviceRedirect(TorchFunctionMode):
    """Send tensor factories (and `.to(device)`/`.cuda()`) to `device` while building inputs."""

    def __init__(self, device: str):
        super().__init__()
        self.device = torch.device(device)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in _FACTORIES and "device" in kwargs:
            if not sys._getframe(1).f_code.co_filename.startswith(_KEEP_DEVICE_IN):
                kwargs["device"] = self.device
        elif func is torch.Tensor.cuda:
            return args[0].to(self.device)
        elif func is torch.Tensor.to:
            args, kwargs = self._fix_to(args, kwargs)
        return func(*args, **kwargs)

    def _fix_to(self, args, kwargs):
        args = list(args)
        for i, a in enumerate(args[1:], 1):
            if isinstance(a, (str, torch.device)):
                args[i] = self.device
        if "device" in kwargs:
            kwargs["device"] = self.device
        return tuple(args), kwargs


def import_file(path: str | Path, name: str):
    """Import a Python file as a fresh module under a unique name."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class ProblemRuntime:
    """Builds reference models and fresh inputs for one problem on one device."""

    def __init__(self, spec: dict, device: str):
        self.spec, self.kind, self.device = spec, spec["kind"], device
        self.task = None
        if self.kind == "kbx":  # KernelBench-X: a function and a test that makes the inputs
            from aka.evaluate.kbx_runtime import KbxTask
            self.task = KbxTask(spec["reference"], spec["meta"], device)
            self.ref_mod, self.input_mod, self._takes_device = self.task.module, None, False
            return
        self.ref_mod = import_file(spec["reference"], "_aka_reference")
        self.input_mod = import_file(spec["input"], "_aka_inputs") if spec.get("input") else None
        if self.kind != "kernelbench" and not hasattr(self.input_mod, "_make_inputs"):
            raise ImportError(f"{spec['input']} defines no _make_inputs")
        self._takes_device = False
        if self.input_mod is not None:
            params = inspect.signature(self.input_mod._make_inputs).parameters
            self._takes_device = "device" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())

    def _set_constants(self, shape: dict) -> None:
        """KernelBench's small shape: module-level size constants overridden (aka/kernelbench.py),
        set before get_init_inputs/get_inputs read them; every other shape gets the originals."""
        want = dict((shape.get("input_kwargs") or {}).get("constants") or {})
        if not hasattr(self, "_original_constants"):
            self._original_constants = {}
        for k, v in want.items():
            self._original_constants.setdefault(k, getattr(self.ref_mod, k))
        for k, orig in self._original_constants.items():
            v = want.get(k, orig)
            setattr(self.ref_mod, k, tuple(v) if isinstance(orig, tuple) else v)

    def init_args(self, shape: dict) -> tuple[list, dict]:
        if self.kind == "kbx":
            return [], {}
        if self.kind == "kernelbench":
            self._set_constants(shape)
            with DeviceRedirect(self.device):
                return list(self.ref_mod.get_init_inputs()), {}
        return [], dict(shape.get("init_kwargs", {}))

    def make_reference(self, shape: dict) -> torch.nn.Module:
        args, kwargs = self.init_args(shape)
        model = self.task.reference_model() if self.task else self.ref_mod.Model(*args, **kwargs)
        return model.to(self.device).eval()

    def cost_vars(self, inputs: dict, shape: dict) -> dict | None:
        """The values input.py's `_cost_vars(inputs, **input_kwargs)` counts on these inputs (a
        data-dependent cost, e.g. how many experts a routing batch reaches), or None."""
        fn = getattr(self.input_mod, "_cost_vars", None) if self.input_mod is not None else None
        if fn is None:
            return None
        out = fn(inputs, **dict(shape.get("input_kwargs", {})))
        return {str(k): float(v) for k, v in out.items()} if out else None

    def make_inputs(self, shape: dict) -> dict[str, object]:
        """Fresh inputs as an ordered dict of name -> value (KernelBench: positional names)."""
        if self.task is not None:
            kw = shape.get("input_kwargs") or {}
            return self.task.capture(int(kw["line"]), dict(kw.get("bind") or {}))
        if self.kind == "kernelbench":
            self._set_constants(shape)
            with DeviceRedirect(self.device):
                vals = self.ref_mod.get_inputs()
            vals = [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in vals]
            return {f"arg{i}": v for i, v in enumerate(vals)}
        kw = dict(shape.get("input_kwargs", {}))
        if self._takes_device:
            kw["device"] = self.device
        with DeviceRedirect(self.device):
            out = self.input_mod._make_inputs(**kw)
        if not isinstance(out, dict):
            raise TypeError(f"_make_inputs returned {type(out).__name__}, expected a dict")
        return {k: (v.to(self.device) if isinstance(v, torch.Tensor) else v) for k, v in out.items()}


def candidate_class(module, kind: str, name: str) -> type:
    """The class the harness instantiates for a candidate module: `name` as the static check
    found it (aka/evaluate/static.py). A class is used as is; for a KernelBench-X problem a
    function (`kernel_function`, the task's function) becomes a Module whose forward calls it with
    the inputs as keywords, as the reference function is called."""
    obj = getattr(module, name)
    if kind == "kbx" and callable(obj) and not isinstance(obj, type):
        from aka.evaluate.kbx_runtime import function_model
        return function_model(obj, f"{name}_module")
    return obj  # anything else fails where it is used, as a verdict


def call(model, inputs: dict):
    """Call a model the way its problem expects: KernelBench positionally, operators by keyword."""
    if inputs and all(k.startswith("arg") and k[3:].isdigit() for k in inputs):
        return model(*inputs.values())
    return model(**inputs)

"""Make Triton 3.6's CPU interpreter behave like the GPU it stands in for.

Measured here (triton 3.6.0, 2026-11-30): the interpreter converts fp32 -> bf16 by truncation,
even with fp_downcast_rounding="rtne", doubling the rounding error (relative norm error 3.3e-3
against 1.7e-3 for round-to-nearest-even on N(0, 9) data), and it casts to fp8 with numpy's
`astype(uint8)`, i.e. numerically rather than bit-wise. The GPU rounds to nearest even and
saturates fp8 (cvt...satfinite). CPU verdicts must mean what GPU verdicts mean, so the worker
replaces the interpreter's float casts with torch's (RTNE) before any candidate runs.

Two more gaps, also fixed here: with NumPy >= 2.4 the interpreter's `tensor.__index__` calls
int() on a one-element 1-D array, which NumPy no longer allows, so any `range(0, n)` over a
runtime `n` fails; and `@triton.autotune` with several configs tries to benchmark through a GPU
driver. Under the interpreter (correctness only) an autotuned kernel runs its first config.
And `tl.dot` on bf16 operands multiplies their uint16 bit patterns as integers (an error of 2e10
on a 16x16 product of N(0,1) values); fp8 operands go through the truncating conversion. Tensor
cores multiply exactly and accumulate in fp32, so here operands are widened exactly (by torch)
to fp32 first.
"""
from __future__ import annotations

import numpy as np
import torch

_FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def _torch_dtype(tl_ty):
    import triton.language as tl
    table = {tl.bfloat16: torch.bfloat16, tl.float16: torch.float16, tl.float32: torch.float32,
             tl.float64: torch.float64, tl.float8e4nv: torch.float8_e4m3fn, tl.float8e5: torch.float8_e5m2}
    return table.get(tl_ty)


def _to_torch(data: np.ndarray, dt: torch.dtype) -> torch.Tensor:
    if dt == torch.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(data).view(np.int16)).view(torch.bfloat16)
    if dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        return torch.from_numpy(np.ascontiguousarray(data).view(np.uint8)).view(dt)
    return torch.from_numpy(np.ascontiguousarray(data))


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.view(torch.uint8).numpy()
    return t.numpy()


def install() -> bool:
    try:
        import triton.runtime.interpreter as interp
    except ImportError:
        return False
    builder_cls = interp.InterpreterBuilder
    if getattr(builder_cls.cast_impl, "_aka_rtne", False):
        return True
    original = builder_cls.cast_impl

    def cast_impl(self, src, dst_type):
        s_t, d_t = _torch_dtype(src.dtype.scalar), _torch_dtype(dst_type.scalar)
        if s_t is None or d_t is None or s_t == d_t or not ({s_t, d_t} - {torch.float32, torch.float64, torch.float16}):
            return original(self, src, dst_type)  # numpy already does IEEE fp32/fp64/fp16 casts right
        x = _to_torch(src.data, s_t)
        name = str(d_t).replace("torch.", "")
        if name in _FP8_MAX:
            x = x.to(torch.float32).clamp(-_FP8_MAX[name], _FP8_MAX[name])
        out = x.to(d_t)
        return interp.TensorHandle(_to_numpy(out).reshape(src.data.shape), dst_type.scalar)

    original_fp_to_fp = builder_cls.create_fp_to_fp

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if _torch_dtype(src.dtype.scalar) is None or _torch_dtype(dst_type.scalar) is None:
            return original_fp_to_fp(self, src, dst_type, rounding_mode)
        return cast_impl(self, src, dst_type)

    original_patch = interp._patch_lang_tensor

    def _patch_lang_tensor(tensor, scope):
        original_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    interp._patch_lang_tensor = _patch_lang_tensor
    import triton.runtime.autotuner as autotuner
    original_run = autotuner.Autotuner.run

    def autotune_run(self, *args, **kwargs):
        if len(self.configs) > 1:
            self.configs = self.configs[:1]
        return original_run(self, *args, **kwargs)

    autotuner.Autotuner.run = autotune_run
    original_dot = builder_cls.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        ta, tb = _torch_dtype(a.dtype.scalar), _torch_dtype(b.dtype.scalar)
        narrow = {torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2}
        if ta not in narrow and tb not in narrow:
            return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)
        a32 = _to_torch(a.data, ta).to(torch.float32).numpy() if ta in narrow else a.data.astype(np.float32)
        b32 = _to_torch(b.data, tb).to(torch.float32).numpy() if tb in narrow else b.data.astype(np.float32)
        return interp.TensorHandle(np.matmul(a32, b32, dtype=d.data.dtype) + d.data, d.dtype.scalar)

    builder_cls.create_dot = create_dot
    cast_impl._aka_rtne = True
    builder_cls.cast_impl = cast_impl
    builder_cls.create_fp_to_fp = create_fp_to_fp
    return True

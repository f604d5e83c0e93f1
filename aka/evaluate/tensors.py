"""Tensor helpers of the judge: host/device copies, poisoning, bit equality, digests, outliers.

The judge alone uses them on tensors it owns; nothing here runs candidate code."""
from __future__ import annotations

import hashlib

import torch

from aka.evaluate import compare as cmp
from aka.evaluate.result import StageFailure


def to_host(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", copy=True)
    if isinstance(x, dict):
        return {k: to_host(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(to_host(v) for v in x)
    return x


def to_device(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device, copy=True)
    if isinstance(x, dict):
        return {k: to_device(v, device) for k, v in x.items()}
    return x


def poison(x) -> None:
    """Overwrite tensors the harness is done with, so freed memory never holds right answers."""
    for t in _tensors(x):
        try:
            if t.is_floating_point():
                t.fill_(float("nan"))
            elif t.dtype != torch.bool:
                t.fill_(-1)
        except RuntimeError:
            pass  # views of inputs that do not allow in-place writes: nothing to protect


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.numel() == 0 or torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def clone_out(x):
    """Detached copies, on the same device, of every tensor in a forward's result: the harness's
    own, so a later candidate call cannot change what was judged."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, dict):
        return {k: clone_out(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(clone_out(v) for v in x)
    return x


_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_DIGEST_CHUNK = 1 << 24


def fingerprint(x) -> str:
    """A digest of every tensor's dtype, shape and bits, computed where the tensor lives (two
    position-weighted integer sums per tensor, in chunks): equal outputs give equal digests, and
    different ones differ but for a deliberate collision. Used only to tell whether outputs changed
    between draws; the outputs themselves are judged by compare."""
    parts = []
    for t in _tensors(x):
        t = t.detach().contiguous().reshape(-1)
        head = (str(t.dtype), tuple(t.shape))
        view = _INT_VIEW.get(t.element_size())
        if view is None or t.numel() == 0:
            parts.append(head + (hashlib.sha256(t.cpu().view(torch.uint8).numpy().tobytes()).hexdigest()
                                 if t.numel() else "",))
            continue
        bits = t.view(view)
        s1 = s2 = 0
        for start in range(0, bits.numel(), _DIGEST_CHUNK):
            v = bits[start:start + _DIGEST_CHUNK].to(torch.int64)
            w = torch.arange(start, start + v.numel(), device=v.device, dtype=torch.int64).remainder_(65521).add_(1)
            s1 += int(v.sum())
            s2 += int((v * w).sum())  # not in place: for int64 tensors v is a view of the output
        parts.append(head + (s1, s2))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def draw_inputs(rt, shape_spec: dict, seed: int, outliers: bool, meta: dict, frac: float, scale: float) -> dict:
    """One draw's inputs as the judge makes them: seeded make_inputs, then, for the outlier stage,
    `frac` of the float inputs scaled by `scale` (meta outliers.exempt_inputs left alone).
    scripts/outlier_rate.py reproduces the judge's draws through this."""
    torch.manual_seed(seed)
    inputs = rt.make_inputs(shape_spec)
    if outliers:
        exempt = set((meta.get("outliers") or {}).get("exempt_inputs", []))
        inject_outliers(inputs, exempt, frac, scale, torch.Generator().manual_seed(seed + 7))
    return inputs


def inject_outliers(inputs: dict, exempt: set[str], frac: float, scale: float, gen: torch.Generator) -> list[str]:
    touched = []
    for name, t in inputs.items():
        if name in exempt or not isinstance(t, torch.Tensor) or not t.is_floating_point():
            continue
        if t.dtype in cmp.FP8_DTYPES or t.numel() == 0:
            continue
        flat = t.view(-1) if t.is_contiguous() else None
        if flat is None:
            continue
        k = max(1, int(round(frac * t.numel())))
        # Positions drawn with replacement: a repeat scales its element once (both reads see the
        # old value), and k stays 1e-3 of the tensor. A permutation of the whole tensor took 18 s
        # on the host for a 235M-element input, all of it inside a shared GPU hold.
        idx = torch.randint(0, t.numel(), (k,), generator=gen).to(t.device)
        flat[idx] = flat[idx] * scale
        touched.append(name)
    return touched


tensors = _tensors  # public name: every tensor of a nested output


# -- the judge's side of the runner's outputs and arguments ----------------------------------

def poison_fill(t: torch.Tensor) -> None:
    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(-1 if t.dtype.is_signed else 255)


def reassemble(names: list, bufs: dict, structure: list):
    """The candidate's result as the comparator expects it: a tensor, a list or a dict of buffers."""
    if names == ["0"]:
        return bufs.get("0")
    if names and all(n.isdigit() for n in names) and names == [str(i) for i in range(len(names))]:
        return [bufs.get(n) for n in names]
    return {n: bufs.get(n) for n in names}


def output_dtype(name: str) -> torch.dtype:
    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise StageFailure("incorrect", f"candidate output has an unknown dtype {name!r}", "correctness")
    return dt


def jsonable_args(args) -> list:
    out = []
    for a in args:
        if isinstance(a, (int, float, str, bool, type(None), list, dict)):
            out.append(a)
        else:
            raise StageFailure("crashed", f"init argument of type {type(a).__name__} cannot reach the runner",
                               "first_call")
    return out


def dtype_key(dt: torch.dtype) -> str:
    if dt in cmp.FP8_DTYPES:
        return "fp8"
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64",
            torch.int8: "int8"}.get(dt, "fp32")

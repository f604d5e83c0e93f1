"""Roofline floor and performance ratios for one operator call.

The floor (speed of light, SOL) is max(bytes / B_peak, sum_d W_d / P_d): the
time the call would take if it moved its minimum bytes at peak bandwidth and
did its FLOPs at each dtype's peak rate, whichever is longer. Built from
datasheet ceilings it is a true lower bound, which is what lets
``perf_metrics`` flag times below it as impossible (a timing bug, a cached or
skipped computation), never as wins.

torch is imported lazily: ``eval_expr`` and ``roofline`` work without it.
"""

from __future__ import annotations

import ast
import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable

DTYPE_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")

# Times this much below the floor are flagged impossible. 5% covers boost
# clocks above the datasheet's, ceiling rounding, and event-timer granularity.
IMPOSSIBLE_MARGIN = 0.05

_MAX_EXPR_CHARS = 2000

# ---------------------------------------------------------------- dtypes

_DTYPE_ALIASES: dict[str, tuple[str, int]] = {
    # name -> (dtype key, bytes per element)
    "float64": ("fp64", 8), "double": ("fp64", 8), "fp64": ("fp64", 8),
    "float32": ("fp32", 4), "float": ("fp32", 4), "fp32": ("fp32", 4),
    "tf32": ("tf32", 4),
    "bfloat16": ("bf16", 2), "bf16": ("bf16", 2),
    "float16": ("fp16", 2), "half": ("fp16", 2), "fp16": ("fp16", 2),
    "float8_e4m3fn": ("fp8", 1), "float8_e4m3fnuz": ("fp8", 1),
    "float8_e5m2": ("fp8", 1), "float8_e5m2fnuz": ("fp8", 1), "fp8": ("fp8", 1),
    "int8": ("int8", 1), "uint8": ("int8", 1),
}
# Element sizes of dtypes that have no compute key of their own.
_OTHER_BYTES = {"int16": 2, "short": 2, "int32": 4, "int": 4, "uint32": 4,
                "int64": 8, "long": 8, "uint64": 8, "bool": 1,
                "complex64": 8, "complex128": 16, "float8_e8m0fnu": 1}


# A shape is "large" when its roofline time is at least this: there the ceiling, not launch latency
# (a few us per kernel), is what limits, so a fraction of the ceiling means something.
LARGE_SOL_US = 10.0


def _dtype_name(x: Any) -> str:
    s = str(x)
    return s[len("torch."):] if s.startswith("torch.") else s


def dtype_key(torch_dtype: Any) -> str:
    """Cost/peak key ("bf16", "fp8", ...) for a torch dtype or its name."""
    name = _dtype_name(torch_dtype)
    if name in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[name][0]
    raise ValueError(f"dtype {name!r} has no compute key (one of {DTYPE_KEYS})")


def dtype_bytes(name_or_dtype: Any) -> int:
    """Bytes per element of a torch dtype, its name ("bfloat16"), or a key ("bf16")."""
    itemsize = getattr(name_or_dtype, "itemsize", None)
    if isinstance(itemsize, int) and not isinstance(name_or_dtype, str):
        return itemsize
    name = _dtype_name(name_or_dtype)
    if name in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[name][1]
    if name in _OTHER_BYTES:
        return _OTHER_BYTES[name]
    raise ValueError(f"unknown dtype {name!r}")


# ------------------------------------------------------------- expressions

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}


def _pow(a, b):
    # Exact integer powers for shape arithmetic, floats otherwise; both bounded
    # so an expression like 10**10**10 fails fast instead of hanging.
    if isinstance(a, int) and isinstance(b, int) and 0 <= b <= 256 and abs(a) < 2**64:
        return a**b
    try:
        r = float(a) ** float(b)
    except (OverflowError, ZeroDivisionError) as exc:
        raise ValueError(f"{a} ** {b}: {exc}") from None
    if isinstance(r, complex) or math.isinf(r):
        raise ValueError(f"{a} ** {b} is not a finite real number")
    return r


def _log2(x):
    if x <= 0:
        raise ValueError(f"log2({x}) is undefined")
    return math.log2(x)


def _sqrt(x):
    if x < 0:
        raise ValueError(f"sqrt({x}) is undefined")
    return math.sqrt(x)


@functools.lru_cache(maxsize=256)
def routed_experts(num_experts: float, ep_size: float, top_k: float, num_tokens: float, bias_std: float) -> float:
    """How many of a rank's `num_experts` experts receive at least one of `num_tokens` tokens, each
    routed to its `top_k` largest of `num_experts * ep_size` logits N(0, 1) plus a per-expert bias
    N(0, bias_std^2) drawn once per batch (the routing law of bench/ops/fused_moe/input.py): a MoE
    layer's weight bytes are those experts'. The median over 41 seeded Monte-Carlo batches, the
    typical batch: the uniform-routing expectation E(1 - (1 - k/(E ep))^T) assumes every expert
    equally likely and overstates it where T k / (E ep) is small (DeepSeek-V3 at EP16, 128 tokens:
    15.7 experts against a median of 13 under the bias), which put a correct kernel on the H100 "below
    the roofline floor" (results/h100/device-2026-12-05b). One batch can hit a few experts fewer
    or more than the median (the bias is drawn per batch), so an evaluation counts the batch it
    times (input.py's _cost_vars) and this estimate serves where there is none (bench weights,
    tuners). Deterministic (its own generator, the global RNG untouched), cached per
    shape; about 0.5 s at 16384 tokens over 256 experts.
    """
    import torch
    e, ep, k, t = int(num_experts), int(ep_size), int(top_k), int(num_tokens)
    total = e * ep
    if not (0 < k <= total and e > 0 and t > 0):
        raise ValueError(f"routed_experts: bad arguments E={e} ep={ep} k={k} T={t}")
    g = torch.Generator().manual_seed(1234)
    hits = []
    for _ in range(41):
        bias = torch.randn(total, generator=g) * float(bias_std)
        local = torch.zeros(e, dtype=torch.bool)
        for lo in range(0, t, 4096):     # rows in chunks: a few MB at a time
            n = min(4096, t - lo)
            ids = (torch.randn(n, total, generator=g) + bias).topk(k, dim=-1).indices
            ids = ids[ids < e]
            local[ids] = True
            if bool(local.all()):
                break
        hits.append(int(local.sum()))
    return float(sorted(hits)[20])


_FUNCS: dict[str, tuple[Callable, int, int]] = {
    # name -> (function, min args, max args)
    "routed_experts": (routed_experts, 5, 5),
    "min": (lambda *a: min(a), 1, 64), "max": (lambda *a: max(a), 1, 64),
    "ceil": (math.ceil, 1, 1), "floor": (math.floor, 1, 1),
    "log2": (_log2, 1, 1), "sqrt": (_sqrt, 1, 1),
}


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def eval_expr(expr: str, env: dict) -> float:
    """Evaluate a cost expression safely by walking its syntax tree.

    Allowed: numbers, names from ``env``, + - * / // ** %, unary + -, and calls
    to min, max, ceil, floor, log2, sqrt and dtype_bytes. ``dtype_bytes`` may be
    written bare or as ``dtype_bytes()`` (bytes of ``env["dtype"]``) or as
    ``dtype_bytes(name)``. Everything else raises ValueError naming the piece.
    """
    if not isinstance(expr, str):
        if _is_num(expr):
            return float(expr)
        raise ValueError(f"cost expression must be a string or number, got {type(expr).__name__}")
    if len(expr) > _MAX_EXPR_CHARS:
        raise ValueError(f"cost expression longer than {_MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"cannot parse cost expression {expr!r}: {exc.msg}") from None

    def env_dtype_bytes() -> int:
        if "dtype" not in env:
            raise ValueError("dtype_bytes used but the shape has no 'dtype' kwarg")
        return dtype_bytes(env["dtype"])

    def num(node: ast.AST) -> int | float:
        v = ev(node)
        if isinstance(v, bool):
            return int(v)
        if not _is_num(v):
            raise ValueError(f"{ast.unparse(node)!r} is not a number ({type(v).__name__})")
        return v

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            if _is_num(node.value):
                return node.value
            raise ValueError(f"constant {node.value!r} not allowed")
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id == "dtype_bytes":
                return env_dtype_bytes()
            raise ValueError(f"unknown name {node.id!r} in cost expression")
        if isinstance(node, ast.BinOp):
            a, b = num(node.left), num(node.right)
            if isinstance(node.op, ast.Pow):
                return _pow(a, b)
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise ValueError(f"operator {type(node.op).__name__} not allowed")
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0:
                raise ValueError(f"division by zero in {ast.unparse(node)!r}")
            return op(a, b)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = num(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name):
                raise ValueError(f"call of {ast.unparse(node.func)!r} not allowed")
            fname = node.func.id
            if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                raise ValueError(f"keyword or starred arguments in {ast.unparse(node)!r}")
            if fname == "dtype_bytes":
                if not node.args:
                    return env_dtype_bytes()
                if len(node.args) != 1:
                    raise ValueError("dtype_bytes takes one argument")
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    return dtype_bytes(arg.value)
                return dtype_bytes(ev(arg))
            if fname not in _FUNCS:
                raise ValueError(f"function {fname!r} not allowed in cost expression")
            fn, lo, hi = _FUNCS[fname]
            if not lo <= len(node.args) <= hi:
                raise ValueError(f"{fname} takes {lo}..{hi} arguments")
            args = [num(a) for a in node.args]
            return fn(*args)
        raise ValueError(f"{type(node).__name__} not allowed in cost expression: "
                         f"{ast.unparse(node)!r}")

    try:
        result = float(num(tree.body))
    except OverflowError:
        raise ValueError(f"cost expression {expr!r} overflows") from None
    if not math.isfinite(result):
        raise ValueError(f"cost expression {expr!r} is not finite ({result})")
    return result


# -------------------------------------------------------------------- cost

@dataclass
class Cost:
    flops: dict[str, float]  # dtype key -> FLOPs (or int ops)
    bytes: float
    source: str  # "meta" or "generic"

    @property
    def total_flops(self) -> float:
        return float(sum(self.flops.values()))


def cost_env(cost_spec: dict, shape_kwargs: dict) -> dict:
    """The names a cost expression may use: the shape's kwargs, plus meta.json's ``cost.vars``
    (name -> expression over the kwargs: the estimate of a data-dependent value, e.g. fused_moe's
    experts_hit) for each name the caller did not supply counted on real inputs."""
    env = dict(shape_kwargs)
    for name, expr in (cost_spec.get("vars") or {}).items():
        if name not in env:
            env[name] = eval_expr(expr, shape_kwargs)
    return env


def cost_from_meta(cost_spec: dict, shape_kwargs: dict, actual_bytes: float | None) -> Cost:
    """Cost from meta.json's ``cost``; ``"bytes": "auto"`` takes ``actual_bytes``."""
    shape_kwargs = cost_env(cost_spec, shape_kwargs)
    flops: dict[str, float] = {}
    for key, expr in (cost_spec.get("flops") or {}).items():
        if key not in DTYPE_KEYS:
            raise ValueError(f"cost flops key {key!r} is not one of {DTYPE_KEYS}")
        flops[key] = eval_expr(expr, shape_kwargs)
    spec_bytes = cost_spec.get("bytes", "auto")
    if spec_bytes == "auto":
        if actual_bytes is None:
            raise ValueError('cost "bytes": "auto" needs the real tensors\' byte count')
        nbytes = float(actual_bytes)
    else:
        nbytes = eval_expr(spec_bytes, shape_kwargs)
    if nbytes < 0 or any(v < 0 for v in flops.values()):
        raise ValueError(f"negative cost: bytes={nbytes}, flops={flops}")
    return Cost(flops=flops, bytes=nbytes, source="meta")


def tensor_bytes(obj: Any) -> int:
    """numel * element_size over tensors nested in tuples/lists/dicts.

    A tensor object reached twice counts once (an op returning ``(x, x)``
    writes x once).
    """
    import torch

    seen: set[int] = set()
    total = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, torch.Tensor):
            if id(o) not in seen:
                seen.add(id(o))
                total += o.numel() * o.element_size()
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
    return total


def generic_cost(model, inputs: dict) -> Cost:
    """Bytes = inputs + outputs; FLOPs from FlopCounterMode (matmul, conv, attention).

    FLOPs are attributed to the dtype of the first floating-point input
    (fp32 when there is none). Ops FlopCounterMode does not count (elementwise,
    reductions) contribute no FLOPs, so the floor is memory-only for them.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        out = model(**inputs)
    total = float(counter.get_total_flops())
    key = "fp32"
    for v in inputs.values():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            key = dtype_key(v.dtype)
            break
    nbytes = tensor_bytes(list(inputs.values())) + tensor_bytes(out)
    return Cost(flops={key: total} if total else {}, bytes=float(nbytes), source="generic")


# ---------------------------------------------------------------- roofline

@dataclass
class Roofline:
    sol_us: float
    mem_us: float
    compute_us: float
    bound: str  # "memory", "compute", or "none" for a zero cost
    notes: list[str] = field(default_factory=list)


def _compute_us(cost: Cost, peak_tflops: dict[str, float], notes: list[str]) -> float:
    total = 0.0
    for key, work in cost.flops.items():
        if not work:
            continue
        peak = peak_tflops.get(key)
        if peak is None:
            peak = peak_tflops.get("fp32")
            if peak is None:
                raise ValueError(f"no peak for {key!r} and no fp32 fallback")
            notes.append(f"no {key} peak on this GPU: its FLOPs use the fp32 rate")
        total += work / (peak * 1e6)  # TFLOP/s = 1e6 FLOP/us
    return total


def roofline(cost: Cost, mem_tbps: float, peak_tflops: dict[str, float]) -> Roofline:
    if mem_tbps <= 0:
        raise ValueError("mem_tbps must be positive")
    notes: list[str] = []
    mem_us = cost.bytes / (mem_tbps * 1e6)  # TB/s = 1e6 B/us
    compute_us = _compute_us(cost, peak_tflops, notes)
    if mem_us == 0 and compute_us == 0:
        bound = "none"
    else:
        bound = "memory" if mem_us >= compute_us else "compute"
    return Roofline(max(mem_us, compute_us), mem_us, compute_us, bound, notes)


def perf_metrics(cost: Cost, time_us: float, mem_tbps: float,
                 peak_tflops: dict[str, float]) -> dict:
    """Ratios of a measured time to the ceilings.

    ``iou``: achieved bytes/s over peak bandwidth; ``mfu``: (sum_d W_d/P_d)/time,
    FLOP/s over peak for a single dtype; ``sol_fraction``: sol_us/time_us.
    ``impossible``: time_us < sol_us * (1 - IMPOSSIBLE_MARGIN). With datasheet
    ceilings such a time cannot be real; callers must treat it as a failed
    measurement and never as a win.
    """
    if not time_us > 0:
        raise ValueError(f"time_us must be positive, got {time_us}")
    r = roofline(cost, mem_tbps, peak_tflops)
    return {
        "time_us": time_us,
        "sol_us": r.sol_us,
        "mem_us": r.mem_us,
        "compute_us": r.compute_us,
        "bound": r.bound,
        "iou": r.mem_us / time_us,
        "mfu": r.compute_us / time_us,
        "sol_fraction": r.sol_us / time_us,
        "achieved_tbps": cost.bytes / (time_us * 1e6),
        "achieved_tflops": cost.total_flops / (time_us * 1e6),
        "impossible": time_us < r.sol_us * (1.0 - IMPOSSIBLE_MARGIN),
        "notes": r.notes,
    }

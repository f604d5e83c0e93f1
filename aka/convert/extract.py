"""Turn fallback groups into operator directories that `aka eval` and load_problem accept unchanged.

    <out>/<group>/reference.py   class Model: the model's own module (module groups) or the ATen op
    <out>/<group>/input.py       _make_inputs(inputs, desc, device): the recorded shapes and dtypes
    <out>/<group>/shapes.json    one case per recorded input signature
    <out>/<group>/meta.json      category, tolerance by dtype, cost model, provenance, `extracted`
    <out>/<group>/weights.pt     the module's parameters and buffers, and recorded integer inputs

A module group's reference is the eager module itself, not a rewrite: reference.py builds the
model with the user's factory, takes the submodule by its path and calls it through
torch.func.functional_call with its parameters and buffers passed in as inputs. Weights are
inputs, as in every aka operator (bench/README.md), so a candidate never loads state; they are
the model's recorded values (weights.pt, tensors only, `torch.load(weights_only=True)`), and so
are integer inputs (positions, indices), whose values a random draw would make meaningless.
Float activations are drawn fresh at the recorded shape, dtype, mean and standard deviation.
Extraction checks that the reference, fed the values the module saw during the profile,
reproduces the module's output bit for bit, and that every case runs from input.py.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from aka.convert.fallbacks import FallbackGroup, call_factory, import_root, parse_factory
from aka.evaluate.compare import TOLERANCES

SMALL_TOKENS = 5   # a CPU case keeps the leading (token) dim at 5: odd, and interpreter-fast
SMALL_ABOVE = 16   # recorded token counts above this get a small case of their own
_CONTRACTION = {"aten::linear", "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm",
                "aten::einsum", "aten::scaled_dot_product_attention", "aten::conv1d", "aten::conv2d"}


class ExtractError(ValueError):
    """One line for the user: why a group could not become an operator directory."""


INPUT_PY = '''"""Inputs of an operator extracted by `aka convert`: float activations drawn fresh at the
recorded shape, dtype, mean and std; weights and integer inputs as recorded (weights.pt)."""
from pathlib import Path

import torch

_HERE = Path(__file__).resolve().parent
_cache = {}


def _recorded() -> dict:
    if "w" not in _cache:
        _cache["w"] = torch.load(_HERE / "weights.pt", map_location="cpu", weights_only=True)
    return _cache["w"]


def _make_inputs(inputs: dict, desc: str = "", device: str = "cuda") -> dict:
    out = {}
    for name, spec in inputs.items():
        if "recorded" in spec:  # a copy: a candidate that writes its inputs must not change later draws
            out[name] = _recorded()[spec["recorded"]].to(device).clone()
            continue
        std = spec.get("std") or 1.0
        x = torch.randn(spec["shape"], device=device) * std + spec.get("mean", 0.0)
        out[name] = x.to(getattr(torch, spec["dtype"]))
    return out
'''

MODULE_REFERENCE = '''"""{name}: {cls} at {where}, from the model `{factory}`, extracted by `aka convert`.

The reference is the model's own module: built by its factory, taken by path, and called
through torch.func.functional_call with its parameters and buffers passed in as inputs.
"""
import importlib
import inspect
import sys

import torch
import torch.nn as nn
from torch.func import functional_call

_ROOT = {root!r}
_FACTORY = ({fmod!r}, {ffn!r}, {fkwargs!r})
_PATH = {path!r}
_STATE = {state!r}  # forward input -> the module's parameter or buffer
_cache = {{}}


def _module() -> nn.Module:
    if "m" not in _cache:
        if _ROOT not in sys.path:
            sys.path.insert(0, _ROOT)
        fn = getattr(importlib.import_module(_FACTORY[0]), _FACTORY[1])
        kwargs = dict(_FACTORY[2])
        params = inspect.signature(fn).parameters
        if "device" in params or any(p.kind == p.VAR_KEYWORD for p in params.values()):
            kwargs["device"] = "cpu"
        model, _ = fn(**kwargs)
        # Its own tensors are never read (functional_call swaps the inputs in): free them.
        _cache["m"] = model.get_submodule(_PATH).to("meta")
    return _cache["m"]


class Model(nn.Module):
    """init: the module's scalar configuration (set on it before each call) and forward's
    non-tensor arguments; forward: its tensor arguments, then its parameters and buffers."""

    def __init__(self{init_sig}):
        super().__init__()
        self.attrs = {attrs_expr}
        self.consts = {consts_expr}

    def forward(self, {fwd_sig}) -> {ret}:
        module = _module()
        for attr, value in self.attrs.items():
            setattr(module, attr, value)
        state = {{{state_expr}}}
        return functional_call(module, state, (), {{{args_expr}**self.consts}})
'''

ATEN_REFERENCE = '''"""{name}: `{op}` {where}, from {source}, extracted by `aka convert`.

The reference is the ATen op itself at the recorded arguments.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, {fwd_sig}) -> torch.Tensor:
        return torch.ops.aten.{overload}({call})
'''


def extract(groups: list[FallbackGroup], out_dir: Path, factory: str | None = None,
            on_progress=None) -> list[FallbackGroup]:
    """Write one operator directory per group under `out_dir`; fill `problem_dir` (or `error`).
    `factory`: the model factory the groups were found in (module groups need it)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    live = _Live(factory) if factory and any(g.kind == "module" for g in groups) else None
    for g in groups:
        if on_progress:
            on_progress(g.name)
        target = out_dir / g.name
        try:
            if g.error:
                raise ExtractError(g.error)
            if g.kind == "module":
                if live is None:
                    raise ExtractError("a module group needs the model factory (a trace alone has no weights)")
                _write_module(g, target, live)
            else:
                _write_aten(g, target)
            validate(target, g, live)
        except Exception as e:  # noqa: BLE001 - one group's failure is recorded, the rest go on
            shutil.rmtree(target, ignore_errors=True)
            g.problem_dir, g.error = None, f"{type(e).__name__}: {e}" if not isinstance(e, ExtractError) else str(e)
            continue
        g.problem_dir, g.error = str(target), None
    (out_dir / "fallbacks.json").write_text(json.dumps([g.to_json() for g in groups], indent=1, default=str))
    return groups


class _Live:
    """The user's model, rebuilt on CPU, and the real arguments of every module call in one
    forward of its example inputs."""

    def __init__(self, factory: str):
        import torch
        self.factory = factory
        self.model, (args, kwargs), self.kwargs = call_factory(factory, "cpu")
        self.root = import_root(parse_factory(factory)[0])
        self.seen: dict[str, tuple] = {}
        handles = []
        for p, m in self.model.named_modules():
            handles.append(m.register_forward_pre_hook(self._pre(p), with_kwargs=True))
            handles.append(m.register_forward_hook(self._post(p), with_kwargs=True))
        try:
            with torch.no_grad():
                self.model(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()

    def _pre(self, path):
        def hook(mod, args, kwargs):
            if path not in self.seen:  # the first call, cloned before an in-place write can change it
                self.seen[path] = (_clone(args), _clone(kwargs), None)
        return hook

    def _post(self, path):
        def hook(mod, args, kwargs, out):
            a, kw, prev = self.seen[path]
            if prev is None:
                self.seen[path] = (a, kw, _clone(out))
        return hook


def _clone(obj):
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_clone(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    return obj


def _state_names(params: list[str], args: list[str]) -> dict[str, str]:
    """forward input name -> module state name ("gate_up_proj.weight" -> "gate_up_proj_weight");
    prefixed with w_ where it would collide with a forward argument."""
    out = {}
    for p in params:
        n = p.replace(".", "_")
        while n in args or n in out:
            n = "w_" + n
        out[n] = p
    return out


def _ret(out_spec: dict | None) -> str:
    if out_spec and out_spec.get("kind") == "tuple":
        return "tuple[" + ", ".join("torch.Tensor" for _ in out_spec["items"]) + "]"
    return "torch.Tensor"


def _write_module(g: FallbackGroup, target: Path, live: _Live) -> None:
    import torch
    case0 = g.cases[0]
    path = case0["path"]
    if (case0.get("out") or {}).get("kind") == "unsupported":
        raise ExtractError(f"{g.name}: forward returns {case0['out'].get('type')}, not tensors")
    sub = live.model.get_submodule(path)
    arg_names = list(case0["tensors"])
    state = _state_names(case0.get("params") or [], arg_names)
    tensors = dict(list(sub.named_parameters()) + list(sub.named_buffers()))
    recorded = {f"w:{n}": tensors[p].detach().cpu().clone().contiguous() for n, p in state.items()}
    shapes, small = {}, {}
    for i, case in enumerate(g.cases):
        a, kw, _ = live.seen.get(case["path"], ((), {}, None))
        real = _bind(live.model.get_submodule(case["path"]), a, kw)
        spec = {}
        for name, t in case["tensors"].items():
            if t.get("integer"):
                key = f"c{i}:{name}"
                recorded[key] = real[name].detach().cpu().clone()
                spec[name] = {"recorded": key}
            else:
                spec[name] = {k: t[k] for k in ("shape", "dtype", "mean", "std") if k in t}
        spec.update({n: {"recorded": f"w:{n}"} for n in state})
        shapes[str(i)] = {"init_kwargs": dict(case["consts"]), "input_kwargs": {"inputs": spec, "desc": _desc(case)}}
        small[f"s{i}"] = _small_case(shapes[str(i)], case, recorded, i)
    target.mkdir(parents=True, exist_ok=True)
    torch.save(recorded, target / "weights.pt")
    fmod, ffn, _ = parse_factory(live.factory)
    consts = case0["consts"]
    attrs = {k: v for k, v in (case0.get("attrs") or {}).items() if k not in consts and k not in arg_names}
    for entry in list(shapes.values()) + list(small.values()):
        entry["init_kwargs"] = {**attrs, **entry["init_kwargs"]}
    text = MODULE_REFERENCE.format(
        name=g.name, cls=g.module_class, where=", ".join(g.modules), factory=live.factory, root=live.root,
        fmod=fmod, ffn=ffn, fkwargs={k: v for k, v in live.kwargs.items() if k != "device"}, path=path, state=state,
        init_sig="".join(f", {k}: {type(v).__name__} = {v!r}" for k, v in {**attrs, **consts}.items()),
        attrs_expr="{" + ", ".join(f"{k!r}: {k}" for k in attrs) + "}",
        consts_expr="{" + ", ".join(f"{k!r}: {k}" for k in consts) + "}",
        fwd_sig=", ".join(f"{n}: torch.Tensor" for n in arg_names + list(state)), ret=_ret(case0.get("out")),
        state_expr=", ".join(f"{p!r}: {n}" for n, p in state.items()),
        args_expr="".join(f"{n!r}: {n}, " for n in arg_names))
    _write_common(g, target, text, shapes, small, exempt=list(state), mutates=case0.get("mutates") or [],
                  out_dtypes=_out_dtypes(case0.get("out")))


def _bind(mod, args, kwargs) -> dict:
    import inspect
    try:
        return dict(inspect.signature(mod.forward).bind(*args, **kwargs).arguments)
    except TypeError as e:
        raise ExtractError(f"the recorded call does not bind to {type(mod).__name__}.forward: {e}") from None


def _out_dtypes(out_spec: dict | None) -> list[str]:
    if not out_spec:
        return []
    if out_spec.get("kind") == "tuple":
        return [o["dtype"] for o in out_spec["items"]]
    return [out_spec["dtype"]] if "dtype" in out_spec else []


def _desc(case: dict) -> str:
    return " ".join(f"{n}[{'x'.join(map(str, t['shape']))}]{t['dtype']}" for n, t in case["tensors"].items())


def _small_case(entry: dict, case: dict, recorded: dict, i: int) -> dict:
    """The same case with the leading (token) dim cut to SMALL_TOKENS where it is large: the
    weights keep their shapes, so only token-major inputs shrink (validate() drops a small case
    the module rejects)."""
    tensors = case["tensors"]
    lead = next((t["shape"][0] for t in tensors.values() if t["shape"]), None)
    if lead is None or lead <= SMALL_ABOVE:
        return json.loads(json.dumps(entry))
    spec = {}
    for name, s in entry["input_kwargs"]["inputs"].items():
        s = dict(s)
        if "recorded" in s and s["recorded"].startswith("c"):
            t = recorded[s["recorded"]]
            if t.dim() and t.shape[0] == lead:
                key = f"s{i}:{name}"
                recorded[key] = t[:SMALL_TOKENS].clone()
                s["recorded"] = key
        elif "shape" in s and s["shape"] and s["shape"][0] == lead:
            s["shape"] = [SMALL_TOKENS] + list(s["shape"][1:])
        spec[name] = s
    desc = entry["input_kwargs"]["desc"].replace(f"[{lead}x", f"[{SMALL_TOKENS}x").replace(f"[{lead}]", f"[{SMALL_TOKENS}]")
    return {"init_kwargs": dict(entry["init_kwargs"]), "input_kwargs": {"inputs": spec, "desc": desc}}


def _category(g: FallbackGroup) -> str:
    ops, cls = set(g.ops), (g.op_kind or "").lower()
    if "norm" in cls or {"aten::rsqrt", "aten::mean"} <= ops or "aten::layer_norm" in ops:
        return "Normalization"
    if ops & _CONTRACTION and ops & {"aten::softmax", "aten::_softmax"}:
        return "Fusion"  # attention: two contractions and a softmax
    if ops and ops <= _CONTRACTION:
        return "MatrixMultiply"
    if ops & {"aten::silu", "aten::gelu", "aten::relu", "aten::sigmoid", "aten::tanh"}:
        return "Activation" if len(ops) == 1 else "Fusion"
    return "Math"


def _write_common(g: FallbackGroup, target: Path, reference: str, shapes: dict, small: dict,
                  exempt: list[str], mutates: list[str], out_dtypes: list[str]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    (target / "reference.py").write_text(reference)
    (target / "input.py").write_text(INPUT_PY)
    (target / "shapes.json").write_text(json.dumps(shapes, indent=1))
    dtype = next((d for d in out_dtypes if d in TOLERANCES), "float32")
    meta = {
        "name": g.name,
        "category": _category(g),
        "description": f"{g.op_kind} ({', '.join(sorted(g.ops))}) from {g.source}",
        "dtypes": sorted(set(g.dtypes)),
        "phases": [],
        # The per-dtype default for the output dtype, written out so apply() and a reader see it.
        "tolerance": dict(TOLERANCES[dtype]),
        "compare": {"default": "allclose"},
        "outliers": {"enabled": True, "exempt_inputs": exempt,
                     **({"band": "row"} if set(g.ops) & _CONTRACTION else {})},
        "mutates": mutates,
        # Bytes from the real tensors; FLOPs counted by the harness (FlopCounterMode) on the
        # reference, which counts contractions only: elementwise ops are bandwidth-bound anyway.
        "cost": {"bytes": "auto"},
        "shapes": {sid: {"source": g.source, "modules": g.modules, "calls": g.calls, "share": g.share,
                         "time_us": g.time_us, "time_basis": g.time_basis} for sid in shapes},
        "small_shapes": small,
        "importance": g.share,
        "extracted": {"kind": g.kind, "module_class": g.module_class, "modules": g.modules, "source": g.source,
                      "ops": g.ops, "cases": g.cases},
        "notes": f"Extracted by `aka convert` from {g.source}; {100 * g.share:.2f}% of the profiled "
                 f"{g.time_basis.upper()} time in {g.calls} call(s) per forward.",
    }
    (target / "meta.json").write_text(json.dumps(meta, indent=1, default=str))


# -- ATen groups ------------------------------------------------------------------------------

def _parse_concrete(text, typ):
    if text in (None, ""):
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


def _resolve_overload(name: str, dims: list, types: list):
    """The overload of `aten::name` whose schema takes a tensor exactly where the trace shows one."""
    import torch
    packet = getattr(torch.ops.aten, name.split("::", 1)[1], None)
    if packet is None:
        raise ExtractError(f"no ATen op {name}")
    is_tensor = [bool(t) and t not in ("Scalar", "ScalarList", "GenericList", "TensorList") for t in types]
    for ov in packet.overloads():
        schema = getattr(packet, ov)._schema
        if len(schema.arguments) != len(dims) or schema.is_mutable:
            continue
        kinds = [str(a.type) in ("Tensor", "Optional[Tensor]") for a in schema.arguments]
        if all(k == t or (not t and str(a.type).startswith("Optional")) for k, t, a in zip(kinds, is_tensor, schema.arguments)):
            return ov, schema
    raise ExtractError(f"{name}: no overload matches the traced arguments {types}")


def _write_aten(g: FallbackGroup, target: Path) -> None:
    import torch
    case = g.cases[0]
    info = case["aten"]
    if any(t.get("dtype") not in TOLERANCES and not str(t.get("dtype", "")).startswith("float")
           for t in case["tensors"].values()):
        raise ExtractError(f"{g.name}: integer tensor inputs of a traced op (values unknown to a trace)")
    ov, schema = _resolve_overload(info["name"], info["dims"], info["types"])
    concrete = info.get("concrete") or [""] * len(info["dims"])
    pos, kw, names = [], [], []
    for i, a in enumerate(schema.arguments):
        if f"arg{i}" in case["tensors"]:
            val = f"arg{i}"
            names.append(val)
        else:
            val = repr(_parse_concrete(concrete[i] if i < len(concrete) else "", info["types"][i]))
        (kw if a.kwarg_only else pos).append(val if not a.kwarg_only else f"{a.name}={val}")
    text = ATEN_REFERENCE.format(name=g.name, op=info["name"], where=f"in {', '.join(g.modules)}" if g.modules else "",
                                 source=g.source, fwd_sig=", ".join(f"{n}: torch.Tensor" for n in names),
                                 overload=f"{info['name'].split('::')[1]}.{ov}", call=", ".join(pos + kw))
    spec = {n: {"shape": t["shape"], "dtype": t["dtype"], "mean": 0.0, "std": 1.0} for n, t in case["tensors"].items()}
    shapes = {"0": {"init_kwargs": {}, "input_kwargs": {"inputs": spec, "desc": _desc(case)}}}
    small = {"s0": _small_case(shapes["0"], case, {}, 0)}
    target.mkdir(parents=True, exist_ok=True)
    torch.save({}, target / "weights.pt")
    dt = next(iter(case["tensors"].values()))["dtype"] if case["tensors"] else "float32"
    _write_common(g, target, text, shapes, small, exempt=[], mutates=[], out_dtypes=[dt])


# -- validation -------------------------------------------------------------------------------

def validate(target: Path, g: FallbackGroup, live: _Live | None) -> None:
    """load_problem accepts the directory; every case (and small case) runs from input.py; a
    module group's reference reproduces the module's recorded output exactly. A small case that
    does not run is dropped (the module needs its recorded token count), a benchmark case not."""
    import torch
    from aka.evaluate.loader import ProblemRuntime, call
    from aka.problem import load_problem
    prob = load_problem(target)
    rt = ProblemRuntime(prob.worker_spec(), "cpu")
    for s in prob.shapes.values():
        with torch.no_grad():
            call(rt.make_reference(s.to_json()), rt.make_inputs(s.to_json()))
    meta = json.loads((target / "meta.json").read_text())
    for sid, s in list(prob.small_shapes.items()):
        try:
            with torch.no_grad():
                call(rt.make_reference(s.to_json()), rt.make_inputs(s.to_json()))
        except Exception:  # noqa: BLE001
            meta["small_shapes"][sid] = json.loads((target / "shapes.json").read_text())[sid[1:]]
    (target / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    if g.kind == "module" and live is not None:
        _check_reproduces(target, g, live, rt)


def _check_reproduces(target: Path, g: FallbackGroup, live: _Live, rt) -> None:
    import torch
    from aka.evaluate.compare import flatten_outputs
    case = g.cases[0]
    args, kwargs, out = live.seen[case["path"]]
    real = _bind(live.model.get_submodule(case["path"]), args, kwargs)
    shape = json.loads((target / "shapes.json").read_text())["0"]
    inputs = rt.make_inputs(shape)
    for name in case["tensors"]:
        inputs[name] = real[name]
    with torch.no_grad():
        got = call_ref(rt, shape, inputs)
    for (n, a), (_, b) in zip(flatten_outputs(got), flatten_outputs(out)):
        if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a, b):
            raise ExtractError(f"{g.name}: the extracted reference does not reproduce {case['path']}'s output {n}")


def call_ref(rt, shape: dict, inputs: dict):
    from aka.evaluate.loader import call
    return call(rt.make_reference(shape), inputs)

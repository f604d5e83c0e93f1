"""Find the operators of a model (or a torch.profiler trace) that still run as PyTorch fallbacks.

Grouping (the choice, and why): a user thinks of "the RMSNorm", not of the pow/mean/rsqrt/mul
it issues, and a kernel replaces a module's forward, so the unit is the nn.Module that issued
the ops. Every ATen op is charged to the innermost module around it (record_function ranges
opened by forward hooks, named by module path; in a foreign trace, with_stack's
"nn.Module: <Class>_<n>" ranges). A module with compute of its own and none below it (RMSNorm,
SiluAndMul, nn.Linear) is one module group; a module whose children compute too (a decoder
block's residual adds) contributes its own compute ops as ATen groups ("add in DecoderBlock"),
since replacing it would replace its children. Ops outside any module (a trace without module
ranges) form ATen groups by op name, input dims and types. Compute is what the harness calls
compute: an ATen op not in aka/evaluate/guards.py GLUE_OPS (views, allocation, copies are
glue); only `aten::` ops count, so a module already running a registered custom op or its own
Triton kernels is not a fallback.

Module groups of the same class, parameter shapes and forward constants are one operator; their
distinct input shapes are its cases (`shapes`), their instances its `modules`. Time is CPU time
on CPU and CUDA kernel time on GPU, summed over the ATen ops charged to the group per forward
(`time_us`, `calls`), and `share` is that over the time of every op of the forward, glue
included. Groups are ranked by share.
"""
from __future__ import annotations

import importlib
import inspect
import json
import re
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aka.convert.trace import MODULE_MARK, Ev, Trace, TraceError, build, load_events, nearest_module
from aka.evaluate.guards import GLUE_OPS


@dataclass
class FallbackGroup:
    name: str                      # unique slug, usable as a directory name ("rms_norm")
    op_kind: str                   # module class ("RMSNorm") or ATen op ("aten::add")
    shapes: list[dict]             # per case: tensor input name -> shape
    dtypes: list[str]              # dtypes of the tensor inputs (first case, in order)
    time_us: float                 # per forward (model) or over the whole trace
    share: float                   # of the profiled time
    calls: int
    source: str                    # "model:<factory>" or "trace:<path>"
    problem_dir: str | None = None  # filled by extract()
    kind: str = "module"           # "module" | "aten"
    module_class: str | None = None  # "examples.llama_block.RMSNorm" (model) or "RMSNorm" (trace)
    modules: list[str] = field(default_factory=list)  # module paths (or the module an ATen op ran in)
    ops: dict[str, int] = field(default_factory=dict)  # compute ATen ops charged to it, per forward
    cases: list[dict] = field(default_factory=list)    # full input specs (see _arg_spec), for extract
    time_basis: str = "cpu"        # "cpu" | "gpu"
    error: str | None = None       # why it cannot be extracted or was not

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "FallbackGroup":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def is_compute(ev: Ev) -> bool:
    if not ev.name.startswith("aten::"):
        return False
    return ev.name[len("aten::"):].split(".")[0] not in GLUE_OPS


# -- factories --------------------------------------------------------------------------------

def parse_factory(spec: str) -> tuple[str, str, dict]:
    """`module:function` or `module:function:key=value,key=value` (values parsed as JSON when
    they parse, else strings) -> (module, function, kwargs)."""
    parts = spec.split(":", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ValueError(f"model factory {spec!r} must be module:function (e.g. examples.llama_block:factory)")
    kwargs = {}
    if len(parts) == 3 and parts[2]:
        for item in parts[2].split(","):
            if "=" not in item:
                raise ValueError(f"factory argument {item!r} in {spec!r} is not key=value")
            k, v = item.split("=", 1)
            try:
                kwargs[k.strip()] = json.loads(v)
            except json.JSONDecodeError:
                kwargs[k.strip()] = v
    return parts[0], parts[1], kwargs


def call_factory(spec: str, device: str | None = None, extra_path: str | None = None):
    """Import and call the factory -> (model, example inputs as (args tuple, kwargs dict), kwargs used).
    `device` is passed when the factory takes a `device` parameter."""
    mod_name, fn_name, kwargs = parse_factory(spec)
    for p in (extra_path, str(Path.cwd())):
        if p and p not in sys.path:
            sys.path.insert(0, p)
    try:
        fn = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot import model factory {spec!r}: {e}") from None
    params = inspect.signature(fn).parameters
    if device is not None and ("device" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())):
        kwargs.setdefault("device", device)
    out = fn(**kwargs)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ValueError(f"{spec} must return (model, example_inputs); got {type(out).__name__}")
    model, inputs = out
    if isinstance(inputs, dict):
        args, kw = (), dict(inputs)
    elif isinstance(inputs, (tuple, list)):
        args, kw = tuple(inputs), {}
    else:
        args, kw = (inputs,), {}
    return model, (args, kw), kwargs


def import_root(module_name: str) -> str:
    """The sys.path entry the factory's module was imported from (recorded so the extracted
    reference can import the user's code from the sandboxed worker)."""
    mod = sys.modules[module_name]
    root = Path(mod.__file__).resolve().parent
    for _ in range(module_name.count(".")):
        root = root.parent
    return str(root)


# -- profiling a model ------------------------------------------------------------------------

def _tensor_spec(t) -> dict:
    import torch
    spec = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
    if t.is_floating_point() and t.numel():
        f = t.detach().float()
        spec["mean"] = float(f.mean())
        spec["std"] = float(f.std()) if t.numel() > 1 else 0.0
    elif t.dtype == torch.bool or not t.is_floating_point():
        spec["integer"] = True
    return spec


def _arg_spec(module, args, kwargs) -> dict:
    """What one forward call received: tensors (shape, dtype, value statistics) and constants."""
    import torch
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError:
        return {"tensors": {}, "consts": {}, "unsupported": "forward arguments do not bind to its signature"}
    tensors, consts, bad = {}, {}, []
    for name, val in bound.arguments.items():
        if isinstance(val, torch.Tensor):
            tensors[name] = _tensor_spec(val)
        elif val is None or isinstance(val, (bool, int, float, str)):
            consts[name] = val
        else:
            bad.append(f"{name} ({type(val).__name__})")
    spec = {"tensors": tensors, "consts": consts}
    if bad:
        spec["unsupported"] = "non-tensor, non-scalar arguments: " + ", ".join(bad)
    return spec


def _out_spec(out):
    import torch
    if isinstance(out, torch.Tensor):
        return {"kind": "tensor", "dtype": str(out.dtype).replace("torch.", ""), "shape": list(out.shape)}
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return {"kind": "tuple", "items": [_out_spec(o) for o in out]}
    return {"kind": "unsupported", "type": type(out).__name__}


class _Hooks:
    """Forward hooks on every module: a record_function range per call, and (when `record`) the
    arguments, outputs and in-place writes of each call."""

    def __init__(self, model):
        self.model, self.record, self.handles = model, False, []
        self.stack, self.count, self.calls = [], {}, {}
        for path, mod in model.named_modules():
            self.handles.append(mod.register_forward_pre_hook(self._pre(path), with_kwargs=True))
            self.handles.append(mod.register_forward_hook(self._post(path), with_kwargs=True))

    def reset(self):
        self.count = {}

    def _pre(self, path):
        import torch

        def hook(mod, args, kwargs):
            k = self.count.get(path, 0)
            self.count[path] = k + 1
            versions = None
            if self.record:
                self.calls[(path, k)] = {"args": _arg_spec(mod, args, kwargs), "module": mod}
                versions = {n: t._version for n, t in _bound_tensors(mod, args, kwargs).items()}
            rf = torch.profiler.record_function(f"{MODULE_MARK}{path}#{k}::{type(mod).__name__}")
            rf.__enter__()
            self.stack.append((rf, versions, (path, k), args, kwargs))
        return hook

    def _post(self, path):
        def hook(mod, args, kwargs, out):
            rf, versions, key, a, kw = self.stack.pop()
            rf.__exit__(None, None, None)
            if self.record:
                rec = self.calls[key]
                rec["out"] = _out_spec(out)
                now = _bound_tensors(mod, a, kw)
                rec["mutates"] = sorted(n for n, v in (versions or {}).items() if now[n]._version != v)
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


def _bound_tensors(mod, args, kwargs) -> dict:
    import torch
    try:
        bound = inspect.signature(mod.forward).bind(*args, **kwargs)
    except TypeError:
        return {}
    return {n: v for n, v in bound.arguments.items() if isinstance(v, torch.Tensor)}


def profile_model(model, inputs, device: str, repeats: int = 3, trace_out: str | Path | None = None):
    """One recording forward (arguments of every module call), then `repeats` profiled ones.
    Returns (Trace of the profiled forwards, {(path, k): call record}); `trace_out`: keep
    torch.profiler's Chrome trace there."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    args, kwargs = inputs
    hooks = _Hooks(model)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if str(device).startswith("cuda") else [])
    try:
        with torch.no_grad():
            hooks.record = True
            model(*args, **kwargs)  # also the warm-up: first-call allocations and lazy inits
            hooks.record = False
            with profile(activities=activities, record_shapes=True) as prof:
                for _ in range(repeats):
                    hooks.reset()
                    model(*args, **kwargs)
                if str(device).startswith("cuda"):
                    torch.cuda.synchronize()
    finally:
        hooks.remove()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = load_events(path)
        if trace_out is not None:
            shutil.copyfile(path, trace_out)
    return build(events), hooks.calls


def find_model_fallbacks(factory: str, device: str = "cpu", repeats: int = 3,
                         trace_out: str | Path | None = None) -> list[FallbackGroup]:
    """Profile `module:factory` (which returns a model and example inputs) on `device`.
    `trace_out`: also write the Chrome trace of the profiled forwards there."""
    model, inputs, _ = call_factory(factory, device)
    trace, calls = profile_model(model, inputs, device, repeats, trace_out)
    cls_names = {path: f"{type(m).__module__}.{type(m).__qualname__}" for path, m in model.named_modules()}
    return group(trace, f"model:{factory}", repeats, calls, cls_names)


def find_trace_fallbacks(trace_path: str | Path) -> list[FallbackGroup]:
    """Fallback groups of a torch.profiler Chrome trace (CPU or GPU; with module ranges when
    the trace has them: ours, or with_stack's "nn.Module: ..." ranges)."""
    try:
        trace = build(load_events(trace_path))
    except TraceError:
        raise
    return group(trace, f"trace:{trace_path}", 1, {}, {})


# -- grouping ---------------------------------------------------------------------------------

def group(trace: Trace, source: str, repeats: int, calls: dict, cls_names: dict) -> list[FallbackGroup]:
    total = trace.total_us() or 1.0
    top = trace.top_ops()
    by_call: dict[int, list[Ev]] = {}   # module range -> top-level ops charged to it
    modranges: dict[int, Ev] = {}
    loose: list[Ev] = []
    for op in top:
        m = nearest_module(op)
        if m is None:
            loose.append(op)
        else:
            by_call.setdefault(id(m), []).append(op)
            modranges[id(m)] = m
    own_compute = {i for i, ops in by_call.items() if any(is_compute(o) for o in ops)}
    # A path whose any call has a computing module range below it is not a leaf.
    not_leaf = set()
    for i in own_compute:
        p = modranges[i].parent
        while p is not None:
            if p.module() is not None:
                not_leaf.add(p.module()[0])
            p = p.parent
    groups: dict[tuple, dict] = {}
    for i in own_compute:
        rng = modranges[i]
        path, cls, k = rng.module()
        ops = by_call[i]
        if path in not_leaf:
            for op in ops:
                if is_compute(op):
                    _add_aten(groups, trace, op, f"{cls} at {path or '<model>'}", cls)
            continue
        rec = calls.get((path, k))
        _add_module(groups, trace, path, cls_names.get(path, cls), ops, rec)
    for op in loose:
        if is_compute(op):
            _add_aten(groups, trace, op, None, None)
    return _finish(groups, source, repeats, total, trace.basis)


def _case_key(rec: dict | None, ops: list[Ev]) -> str:
    if rec is None:
        return json.dumps([(o.name, o.dims(), o.types()) for o in ops if is_compute(o)])
    a = rec["args"]
    return json.dumps({"t": {n: (s["shape"], s["dtype"]) for n, s in a["tensors"].items()}, "c": a["consts"]},
                      sort_keys=True)


def _add_module(groups, trace, path, cls, ops, rec):
    mod = rec["module"] if rec else None
    params = []
    if mod is not None:
        params = [(n, list(t.shape), str(t.dtype)) for n, t in _module_tensors(mod)]
    consts = rec["args"]["consts"] if rec else {}
    attrs = module_attrs(mod) if mod is not None else {}
    ck = _case_key(rec, ops)
    # Without the live module (a trace) its parameters are unknown: distinct input shapes are
    # then distinct operators (four nn.Linear of four weight shapes are four GEMMs).
    key = ("module", cls, json.dumps(params), json.dumps([consts, attrs], sort_keys=True, default=str),
           ck if rec is None else None)
    g = groups.setdefault(key, {"kind": "module", "cls": cls, "time": 0.0, "calls": 0, "modules": [],
                                "ops": {}, "cases": {}})
    g["time"] += sum(trace.time(o) for o in ops)
    g["calls"] += 1
    if path not in g["modules"]:
        g["modules"].append(path)
    for o in ops:
        if is_compute(o):
            g["ops"][o.name] = g["ops"].get(o.name, 0) + 1
    if ck not in g["cases"]:
        if rec is None:  # the module's inputs, as near as a trace shows them: its first op's
            first = next((o for o in ops if _trace_tensors(o)), ops[0])
            g["cases"][ck] = {"tensors": _trace_tensors(first), "consts": {}, "from_trace": True}
        else:
            g["cases"][ck] = dict(rec["args"], out=rec.get("out"), mutates=rec.get("mutates", []),
                                  params=[n for n, _, _ in params], path=path, attrs=attrs)


def module_attrs(mod) -> dict:
    """The module's scalar configuration (eps, head counts, in_features): what a kernel must
    know that its forward arguments do not say."""
    return {k: v for k, v in vars(mod).items()
            if not k.startswith("_") and k != "training" and isinstance(v, (bool, int, float, str))}


def _module_tensors(mod):
    seen = set()
    for n, t in list(mod.named_parameters()) + list(mod.named_buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            yield n, t


def _trace_tensors(op: Ev) -> dict:
    """Tensor inputs of a traced op: positional args with dims and a tensor type."""
    out = {}
    for i, (d, t) in enumerate(zip(op.dims(), op.types())):
        if isinstance(d, list) and t and t not in ("Scalar", "ScalarList", "TensorList", "GenericList") and (d or t):
            out[f"arg{i}"] = {"shape": d, "dtype": _TRACE_DTYPES.get(t, t)}
    return out


_TRACE_DTYPES = {"float": "float32", "c10::BFloat16": "bfloat16", "c10::Half": "float16", "double": "float64",
                 "long int": "int64", "int": "int32", "bool": "bool", "signed char": "int8",
                 "unsigned char": "uint8", "short int": "int16", "c10::Float8_e4m3fn": "float8_e4m3fn"}


def _add_aten(groups, trace, op, where, cls):
    key = ("aten", op.name, json.dumps(op.dims()), json.dumps(op.types()), where and cls)
    g = groups.setdefault(key, {"kind": "aten", "cls": op.name, "time": 0.0, "calls": 0, "modules": [],
                                "ops": {}, "cases": {}, "context": cls})
    g["time"] += trace.time(op)
    g["calls"] += 1
    if where and where not in g["modules"]:
        g["modules"].append(where)
    g["ops"][op.name] = g["ops"].get(op.name, 0) + 1
    g["cases"].setdefault("0", {"tensors": _trace_tensors(op), "consts": {}, "from_trace": True,
                                "aten": {"name": op.name, "dims": op.dims(), "types": op.types(),
                                         "concrete": op.args.get("Concrete Inputs")}})


def _slug(text: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text.split(".")[-1].replace("aten::", "aten_"))
    return re.sub(r"[^a-z0-9_]+", "_", s.lower()).strip("_") or "op"


def _finish(groups: dict, source: str, repeats: int, total: float, basis: str) -> list[FallbackGroup]:
    out, used = [], {}
    ranked = sorted(groups.values(), key=lambda g: -g["time"])
    bases = [_slug(g["cls"]) + (f"_in_{_slug(g['context'])}" if g.get("context") else "") for g in ranked]
    for g, base in zip(ranked, bases):
        if bases.count(base) > 1 and g["kind"] == "module" and g["modules"]:
            base = f"{base}_{_slug(g['modules'][0].replace('.', '_'))}"  # linear_mlp_down_proj
        used[base] = used.get(base, 0) + 1
        name = base if used[base] == 1 else f"{base}_{used[base]}"
        cases = list(g["cases"].values())
        shapes = [{n: s["shape"] for n, s in c["tensors"].items()} for c in cases]
        dtypes = [s["dtype"] for s in cases[0]["tensors"].values()] if cases else []
        err = next((c["unsupported"] for c in cases if c.get("unsupported")), None)
        out.append(FallbackGroup(
            name=name, op_kind=g["cls"].split(".")[-1] if g["kind"] == "module" else g["cls"], shapes=shapes,
            dtypes=dtypes, time_us=g["time"] / repeats, share=g["time"] / total, calls=g["calls"] // repeats or 1,
            source=source, kind=g["kind"], module_class=g["cls"] if g["kind"] == "module" else g.get("context"),
            modules=g["modules"], ops={k: v // repeats or 1 for k, v in g["ops"].items()}, cases=cases,
            time_basis=basis, error=err))
    return out


def table(groups: list[FallbackGroup], limit: int | None = None) -> str:
    """The ranked fallback table, as printed before any conversion starts."""
    rows = [f"{'#':>3} {'share':>7} {'time_us':>10} {'calls':>5}  {'operator':<28} {'kind':<18} shapes / dtypes"]
    for i, g in enumerate(groups[:limit] if limit else groups, 1):
        shp = "; ".join(",".join(f"{n}{list(s)}" for n, s in case.items()) for case in g.shapes[:2])
        rows.append(f"{i:>3} {100 * g.share:6.2f}% {g.time_us:10.1f} {g.calls:>5}  {g.name:<28} {g.op_kind:<18} "
                    f"{shp} {'/'.join(sorted(set(g.dtypes)))}")
    covered = sum(g.share for g in groups)
    basis = groups[0].time_basis.upper() if groups else "CPU"
    rows.append(f"    {100 * covered:6.2f}% of {basis} time in {len(groups)} fallback groups "
                "(the rest: glue ops outside them)")
    return "\n".join(rows)

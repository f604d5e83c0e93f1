"""`aka convert apply`: patch a model with the converted kernels of a library, and check it.

    report = apply(model, "library/", check_inputs=example_inputs)
    aka convert apply examples.llama_block:factory --library library/

Each library operator (`<library>/<op>/kernel.py`, a ModelNew candidate, with a passing
`result.json`) whose problem was extracted from a model (its meta.json `extracted`) becomes a
`torch.library` custom op, `aka_convert::<op>_<digest>`, whose fake (meta) implementation runs
the module's own forward on fake tensors, as the run store's kernel_module.py does for a single
kernel, so torch.compile can trace through it. Every module instance the operator was found at
has its forward replaced by a call of that op with its tensor arguments and its parameters and
buffers. A call the kernel was not verified for (other dtypes or ranks, other constants) runs
the original forward and is counted as such. ATen groups (an op inside a larger module's
forward) have no module to swap and are reported as skipped.

The check runs the original and the patched model on the same inputs and compares the outputs
with aka's comparison (aka/evaluate/compare.py) under the loosest tolerance of the patched
operators (their meta.json `tolerance`): each op is allowed that error, and a block's output
is held to the same band. Where a few elements leave that band, the patched model may still be
as right as the original: rounding differences of a 1-ulp size in one op grow through the ops
after it (on the realistic Llama block on the H200, three verified kernels put 16 of 2.1M
outputs past the band at relative error 0.002; torch.compile of the unpatched block put 169).
Then both are compared with the original run in float64 (`exact_check`): the patched model passes
if it is no further from that than the original's own rounding is (relative error at most 1.25x
the original's, largest error at most 2x the original's plus atol) and its relative error against
the original stays within rel_norm. It also counts the custom-op calls, so a patch that never ran
fails.
On CPU the kernels run in Triton's interpreter with the harness's fixes (interp_fix), as
`aka eval --device cpu` runs them.
"""
from __future__ import annotations

import copy
import hashlib
import inspect
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path


class ApplyError(ValueError):
    """Bad input to apply (no library, no model); one line for the user."""


@dataclass
class PatchReport:
    library: str
    patched: list[dict] = field(default_factory=list)   # {op, module, custom_op}
    skipped: list[dict] = field(default_factory=list)   # {op, module?, reason}
    checked: bool = False
    ok: bool | None = None
    max_abs_err: float | None = None
    rel_err: float | None = None
    tolerance: dict | None = None
    kernel_calls: dict[str, int] = field(default_factory=dict)     # custom op -> calls in the check
    original_calls: dict[str, int] = field(default_factory=dict)   # op -> calls that fell back
    reason: str = ""
    basis: str | None = None       # "direct" (within tolerance of the original) or "float64" (exact_check)
    exact: dict | None = None      # errors against the original in float64, where that was the basis

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        lines = [f"patched {len(self.patched)} module(s) from {self.library}"]
        lines += [f"  {p['module']:<32} <- {p['op']} ({p['custom_op']})" for p in self.patched]
        lines += [f"  skipped {s['op']}{' at ' + s['module'] if s.get('module') else ''}: {s['reason']}"
                  for s in self.skipped]
        if self.checked:
            verdict = "PASS" if self.ok else "FAIL"
            lines.append(f"check {verdict}: max_abs_err {self.max_abs_err:.3g}, rel_err {self.rel_err:.3g} "
                         f"(tolerance {self.tolerance}); kernel calls {sum(self.kernel_calls.values())}"
                         + (f"; {self.reason}" if self.reason else ""))
        else:
            lines.append("not checked (no check inputs)")
        return "\n".join(lines)


@dataclass
class _Entry:
    op: str
    root: Path
    meta: dict
    init_kwargs: dict
    reason: str | None = None


def _problem_meta(op_dir: Path) -> tuple[dict | None, str | None]:
    """The extracted problem's meta.json: beside the kernel, or where provenance.json says."""
    if (op_dir / "meta.json").is_file():
        return json.loads((op_dir / "meta.json").read_text()), None
    prov = op_dir / "provenance.json"
    if prov.is_file():
        p = json.loads(prov.read_text())
        pdir = p.get("problem_dir") or p.get("problem")
        if pdir and (Path(pdir) / "meta.json").is_file():
            return json.loads((Path(pdir) / "meta.json").read_text()), str(pdir)
    return None, None


def library_entries(library_dir: Path) -> list[_Entry]:
    library_dir = Path(library_dir)
    if not library_dir.is_dir():
        raise ApplyError(f"library not found: {library_dir}")
    out = []
    for op_dir in sorted(p for p in library_dir.iterdir() if (p / "kernel.py").is_file()):
        e = _Entry(op_dir.name, op_dir, {}, {})
        res = json.loads((op_dir / "result.json").read_text()) if (op_dir / "result.json").is_file() else {}
        meta, pdir = _problem_meta(op_dir)
        if res.get("status") != "pass":
            e.reason = f"result.json status {res.get('status', 'missing')}: only a passing kernel is applied"
        elif meta is None:
            e.reason = "no meta.json (beside kernel.py or at provenance.json's problem_dir)"
        elif not (meta.get("extracted") or {}).get("kind"):
            e.reason = "its problem was not extracted from a model (no meta.json `extracted`)"
        else:
            e.meta = meta
            shapes = Path(pdir) / "shapes.json" if pdir else op_dir / "shapes.json"
            first = next(iter(json.loads(shapes.read_text()).values())) if shapes.is_file() else {}
            e.init_kwargs = dict(first.get("init_kwargs") or {})
        out.append(e)
    return out


def _ensure_interpreter(device: str) -> None:
    """On CPU the kernels can only run in Triton's interpreter, fixed as the harness fixes it.
    The interpreter must be on before triton is imported (triton.language's own @jit functions,
    tl.sum among them, are made interpretable at import), and torch.profiler imports triton: a
    process that profiled first cannot switch it on any more, so it is told to start with it."""
    if device != "cpu":
        return
    import sys
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
    import triton.language as tl
    if type(tl.sum).__name__ != "InterpretedFunction":
        raise ApplyError("on CPU the kernels run in Triton's interpreter, which must be on before triton is "
                         "imported: set TRITON_INTERPRET=1 before starting Python (`aka convert apply` does)")
    from aka.evaluate.interp_fix import install
    install()


def _model_device(model) -> str:
    t = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return "cpu" if t is None else t.device.type


def _split_inputs(inputs) -> tuple[tuple, dict]:
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, tuple) and len(inputs) == 2 and isinstance(inputs[0], tuple) and isinstance(inputs[1], dict):
        return inputs
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


class _Op:
    """One library kernel as a custom op, shared by every module instance it patches."""

    def __init__(self, entry: _Entry, template, report: PatchReport, device: str):
        import torch
        from aka.evaluate.loader import import_file
        from torch.func import functional_call
        case = entry.meta["extracted"]["cases"][0]
        self.entry, self.report = entry, report
        self.args = list(case["tensors"])
        self.consts = dict(case.get("consts") or {})
        self.attrs = dict(case.get("attrs") or {})
        state = _state_names(case.get("params") or [], self.args)
        self.state = list(state.items())           # (input name, module state name)
        self.out_kind = (case.get("out") or {}).get("kind", "tensor")
        self.dtypes = {n: t["dtype"] for n, t in case["tensors"].items()}
        self.ranks = {n: len(t["shape"]) for n, t in case["tensors"].items()}
        _ensure_interpreter(device)
        src = (entry.root / "kernel.py").read_bytes()
        digest = hashlib.sha256(src + str(entry.root.resolve()).encode()).hexdigest()[:10]
        self.name = f"aka_convert::{entry.op}_{digest}"
        mod = import_file(entry.root / "kernel.py", f"aka_convert_kernel_{entry.op}_{digest}")
        cls = getattr(mod, "ModelNew", None) or getattr(mod, "Model")
        self.kernel = cls(**entry.init_kwargs)
        live = _CUSTOM_OPS.get(self.name)
        if live is not None:  # registered by an earlier apply() in this process: rebind it to this one
            live.update(kernel=self.kernel, counts=report.kernel_calls)
            self.op = live["op"]
            return
        names = self.args + [n for n, _ in self.state]
        ret = "Tensor" if self.out_kind == "tensor" else "(" + ", ".join("Tensor" for _ in case["out"]["items"]) + ")"
        mutated = list(case.get("mutates") or ())
        # An explicit schema must mark what the op writes in place: Tensor(a!) x, Tensor(b!) y.
        schema = "(" + ", ".join(f"Tensor({chr(97 + mutated.index(n))}!) {n}" if n in mutated else f"Tensor {n}"
                                 for n in names) + ") -> " + ret
        opname = self.name
        reference = copy.deepcopy(template).to("meta")   # the unpatched forward, for shapes only

        def impl(*tensors):
            live = _CUSTOM_OPS[opname]
            live["counts"][opname] = live["counts"].get(opname, 0) + 1
            return live["kernel"](**dict(zip(names, tensors)))

        def fake(*tensors):
            kw = dict(zip(names, tensors))
            st = {p: kw[n] for n, p in self.state}
            return functional_call(reference, st, (), {**{n: kw[n] for n in self.args}, **self.consts})

        self.op = torch.library.custom_op(self.name, impl, mutates_args=tuple(mutated), schema=schema)
        self.op.register_fake(fake)
        _CUSTOM_OPS[self.name] = {"op": self.op, "kernel": self.kernel, "counts": report.kernel_calls}

    def matches(self, sub) -> str | None:
        from aka.convert.fallbacks import module_attrs
        attrs = module_attrs(sub)
        diff = [k for k, v in self.attrs.items() if attrs.get(k) != v]
        return f"configuration differs from the converted one ({', '.join(diff)})" if diff else None

    def patch(self, sub, path: str) -> None:
        import torch
        original = sub.forward
        sig = inspect.signature(original)
        op, fell_back = self.op, self.report.original_calls

        def state(name: str):  # looked up per call: a later load_state_dict or re-assignment counts
            obj = sub
            for part in name.split("."):
                obj = getattr(obj, part)
            return obj

        def forward(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            ok = all(isinstance(a.get(n), torch.Tensor) and str(a[n].dtype).replace("torch.", "") == self.dtypes[n]
                     and a[n].dim() == self.ranks[n] for n in self.args)
            ok = ok and all(a.get(k) == v for k, v in self.consts.items())
            if not ok:  # the kernel was verified for these dtypes, ranks and constants only
                fell_back[self.entry.op] = fell_back.get(self.entry.op, 0) + 1
                return original(*args, **kwargs)
            return op(*[a[n] for n in self.args], *[state(p) for _, p in self.state])

        forward._aka_original = original
        sub.forward = forward
        self.report.patched.append({"op": self.entry.op, "module": path, "custom_op": self.name})


# Custom ops live for the process (registering a name twice is an error): name -> the op, and
# the kernel instance and call counter of the latest apply() that uses it.
_CUSTOM_OPS: dict[str, dict] = {}


def _state_names(params, args):
    from aka.convert.extract import _state_names as names
    return names(params, args)


def apply(model, library_dir: str | Path, *, check_inputs=None) -> "PatchReport":
    """Patch `model` in place with the library's kernels; check it against its unpatched self on
    `check_inputs` (a kwargs dict, an args tuple, or (args, kwargs)) when given."""
    import torch
    report = PatchReport(library=str(library_dir))
    entries = library_entries(Path(library_dir))
    device = _model_device(model)
    args, kwargs = _split_inputs(check_inputs) if check_inputs is not None else ((), {})
    ref = None
    if check_inputs is not None:
        with torch.no_grad():
            ref = _detach(model(*args, **kwargs))
    names = {p: m for p, m in model.named_modules()}
    patched_meta = []
    for e in entries:
        if e.reason:
            report.skipped.append({"op": e.op, "reason": e.reason})
            continue
        ex = e.meta["extracted"]
        if ex["kind"] != "module":
            report.skipped.append({"op": e.op, "reason": f"an ATen op inside {', '.join(ex.get('modules') or ['?'])}: "
                                                          "no module of its own to swap"})
            continue
        op = None
        for path in ex["modules"]:
            sub = names.get(path)
            cls = f"{type(sub).__module__}.{type(sub).__qualname__}" if sub is not None else None
            if sub is None or cls != ex["module_class"]:
                report.skipped.append({"op": e.op, "module": path,
                                       "reason": f"the model has no {ex['module_class']} at {path!r}"})
                continue
            if op is None:
                op = _Op(e, sub, report, device)
            why = op.matches(sub)
            if why:
                report.skipped.append({"op": e.op, "module": path, "reason": why})
                continue
            op.patch(sub, path)
        if op is not None:
            patched_meta.append(e.meta)
    if ref is not None:
        _check(model, args, kwargs, ref, patched_meta, report)
    return report


def _detach(out):
    import torch
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, (tuple, list)):
        return type(out)(_detach(o) for o in out)
    if isinstance(out, dict):
        return {k: _detach(v) for k, v in out.items()}
    return out


def float64_reference(model, args=(), kwargs=None):
    """The model's outputs in float64: a copy without the library's patches (each patched module
    gets its class's forward back), its parameters, buffers and float inputs in float64."""
    import torch
    m = copy.deepcopy(model)
    for sub in m.modules():
        f = sub.__dict__.get("forward")
        if f is not None and hasattr(f, "_aka_original"):
            del sub.forward
    m = m.double()

    def cast(t):
        return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
    with torch.no_grad():
        out = _detach(m(*[cast(a) for a in args], **{k: cast(v) for k, v in (kwargs or {}).items()}))
    del m
    return out


def exact_check(out, ref, exact, tol: dict) -> dict:
    """Whether `out` matches the original's output `ref` (both at the model's precision): within
    `tol` directly, or no further from `exact` (the original in float64, float64_reference) than
    `ref` itself is. {"ok", "max_abs_err", "rel_err", "basis", "reason"?, "exact"?}; the errors are
    those against `ref`. `exact`: the float64 outputs or a callable returning them (called only
    when the direct check fails)."""
    from aka.evaluate.compare import compare_outputs
    direct, _ = compare_outputs(out, ref, {"tolerance": tol})
    res = {"ok": bool(direct.ok), "max_abs_err": direct.max_abs_err, "rel_err": direct.rel_err, "basis": "direct"}
    if direct.ok:
        return res
    res["reason"] = direct.reason
    if exact is None or not math.isfinite(direct.max_abs_err) or direct.rel_err > tol.get("rel_norm", 0.0):
        return res
    ex = exact() if callable(exact) else exact
    mine, _ = compare_outputs(out, ex, {"tolerance": tol})
    theirs, _ = compare_outputs(ref, ex, {"tolerance": tol})
    ok = (math.isfinite(mine.max_abs_err) and mine.rel_err <= 1.25 * theirs.rel_err + 1e-12
          and mine.max_abs_err <= 2.0 * theirs.max_abs_err + tol.get("atol", 0.0))
    res["exact"] = {"max_abs_err": mine.max_abs_err, "rel_err": mine.rel_err,
                    "original_max_abs_err": theirs.max_abs_err, "original_rel_err": theirs.rel_err}
    res["basis"] = "float64"
    res["ok"] = ok
    res["reason"] = (f"{direct.reason}; {'no further' if ok else 'and further'} from the float64 original than "
                     f"the original is: rel_err {mine.rel_err:.3g} (original {theirs.rel_err:.3g}), "
                     f"max_abs_err {mine.max_abs_err:.3g} (original {theirs.max_abs_err:.3g})")
    return res


def _check(model, args, kwargs, ref, metas: list[dict], report: PatchReport) -> None:
    import torch
    from aka.evaluate.compare import flatten_outputs, output_rule
    tol: dict[str, float] = {}
    for meta in metas:
        for name, t in flatten_outputs(ref):
            _, rule = output_rule(meta, name, t.dtype)
            for k, v in rule.items():
                tol[k] = max(tol.get(k, 0.0), v)
    if not tol:  # nothing patched: the model must come back unchanged
        tol = {"atol": 0.0, "rtol": 0.0, "rel_norm": 0.0}
    report.kernel_calls.clear()
    with torch.no_grad():
        out = model(*args, **kwargs)
    ran = sum(report.kernel_calls.values())
    res = exact_check(out, ref, (lambda: float64_reference(model, args, kwargs)) if report.patched else None, tol)
    report.checked, report.tolerance = True, tol
    report.max_abs_err = res["max_abs_err"] if math.isfinite(res["max_abs_err"]) else float("inf")
    report.rel_err = res["rel_err"]
    report.basis, report.exact = res["basis"], res.get("exact")
    report.ok = bool(res["ok"]) and (ran > 0 or not report.patched)
    report.reason = res.get("reason", "")
    if res["ok"] and report.patched and ran == 0:
        report.reason = "no converted kernel ran in the patched forward"


# -- CLI --------------------------------------------------------------------------------------

def add_apply_parser(sub) -> None:
    """Register `apply` on an argparse subparsers object (the `aka convert` parser's)."""
    p = sub.add_parser("apply", help="patch a model with a library's kernels and check its outputs")
    p.add_argument("factory", help="module:function returning (model, example inputs), e.g. examples.llama_block:factory")
    p.add_argument("--library", required=True, help="kernel library directory (`aka convert` output)")
    p.add_argument("--device", default="cpu", help="device the factory builds the model on (default cpu)")
    p.add_argument("--json", default=None, help="write the PatchReport JSON here")
    p.add_argument("--remaining", action="store_true", help="profile the patched model: the fallbacks left")
    p.add_argument("--time", action="store_true",
                   help="GPU: end-to-end time of the original (eager, torch.compile) and the patched model, "
                        "CUDA graph replay (aka/convert/e2e.py)")
    p.set_defaults(func=cmd_apply)


def cmd_apply(args) -> int:
    """Exit 0 when the patched model passes the check, 1 when it does not, 2 on bad input."""
    from aka.errors import UserError
    from aka.convert.fallbacks import call_factory
    import sys
    if args.time and not args.device.startswith("cuda"):
        raise UserError("--time needs --device cuda: the end-to-end timing replays CUDA graphs "
                        "(on CPU, apply checks the outputs only)")
    if args.device == "cpu" and "triton" not in sys.modules:
        # before anything imports triton; in a process that already has it (a test run, a notebook)
        # the switch would come too late for these kernels and would leak into later compiles
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        model, inputs, _ = call_factory(args.factory.removeprefix("model:"), args.device)
    except ValueError as e:  # a factory that does not import or returns the wrong thing
        raise UserError(str(e)) from None
    try:
        report = apply(model, args.library, check_inputs=inputs)
    except ApplyError as e:
        raise UserError(str(e)) from None
    print(report.summary())
    out = report.to_json()
    if args.remaining:
        from aka.convert.fallbacks import group, profile_model, table
        trace, calls = profile_model(model, inputs, args.device, repeats=1)
        names = {p: f"{type(m).__module__}.{type(m).__qualname__}" for p, m in model.named_modules()}
        left = group(trace, f"patched:{args.factory}", 1, calls, names)
        print("fallbacks left in the patched model:\n" + table(left))
        out["remaining"] = [g.to_json() for g in left]
    if args.time:
        if not report.ok:
            raise UserError("the patched model failed its check: its time would not be the same model's")
        from aka.convert.e2e import table, time_model
        from aka.hardware import cache_dir
        try:
            out["e2e"] = time_model(args.factory, args.library, args.device, lock_root=str(cache_dir() / "locks"))
        except ApplyError as e:
            raise UserError(str(e)) from None
        print(table(out["e2e"]))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    """`python -m aka.convert.apply FACTORY --library DIR ...`: the same command outside `aka`."""
    import argparse
    import sys
    from aka.errors import UserError
    parser = argparse.ArgumentParser(prog="python -m aka.convert")
    add_apply_parser(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(["apply"] + list(sys.argv[1:] if argv is None else argv))
    try:
        return args.func(args)
    except UserError as e:
        print(f"aka: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

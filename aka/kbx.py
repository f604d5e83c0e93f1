"""KernelBench-X task files, read without running them.

A task file (`data/kernelbenchx/<Category>/<task>.py`) holds a functional reference (one
top-level function, e.g. `def relu(input, inplace=False)`), a separator line of `#` (146 of them
in the dataset; any line of 20 or more `#` and nothing else is taken here), and a test function
`test_<name>()` that builds its own tensors and calls the reference several times: fixed corner
cases (`torch.tensor([...])`), then random draws in a `for mode in ("standard", "outlier")`
loop, often inside `for _ in range(3)` or a loop over sizes and flags.

How those calls become aka shapes (this module reads the AST only; the worker runs the test
function, aka/evaluate/kbx_runtime.py):
  * one shape per call of the reference function in the test function, in source order, and per
    value of the literal loops around it (`for beta, alpha in ((1.0, 1.0), (0.5, 2.0))` gives two
    shapes); a shape is (call line, loop variables' values) and the worker captures the arguments
    of exactly that call when it runs the test with the reference function replaced by a recorder;
  * the outlier iteration of a `mode` loop is left out: aka's own outlier stage scales 0.1% of
    every float input of every shape by 50 (KernelBench-X replaces 0.1-1% of elements with
    N(0,1) * 10), so the standard draw plus that stage covers it;
  * a `range(n)` loop whose variable the body never reads repeats the same call on new random
    values: one shape, since aka draws every shape at least three times anyway;
  * a loop over anything but a literal (a tuple, a list, `range` of ints) is not unrolled: its
    calls are one shape each, the first iteration;
  * calls inside `try:` are the task's error cases (a singular matrix must raise); aka judges
    outputs, so they are left out, and counted in meta `kbx.skipped`.
A candidate defines `kernel_function`, the task's function name or the file stem (KernelBench-X's
entry contract), or a class ModelNew; it is called with the reference's parameter names as
keywords. Inputs the reference writes in place (a `param.add_(...)`, `param[...] = `, `out=param`,
`inplace=` on it, a parameter named `out`) are the problem's `mutates`, exempt from the
inputs-unchanged check.
"""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

from aka.util import parse_py

CATEGORIES = {"Fusion", "Math", "LinearAlgebra", "Activation", "MatrixMultiply", "Reduce", "Index", "Loss",
              "Quantization", "Normalization", "Optimizer", "SpatialOps", "Convolution", "Random", "Pooling"}
SEPARATOR_MIN = 20


def separator_line(text: str) -> int | None:
    """1-based line number of the first line made only of `#` (at least SEPARATOR_MIN), or None."""
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if len(s) >= SEPARATOR_MIN and set(s) == {"#"}:
            return i
    return None


def is_kbx_task(path: Path) -> bool:
    try:
        return path.suffix == ".py" and separator_line(path.read_text()) is not None
    except (OSError, UnicodeDecodeError):
        return False


def load_kbx(path: Path):
    from aka.problem import Problem, ProblemError, ShapeCase
    text = path.read_text()
    sep = separator_line(text)
    try:
        tree = parse_py(text, filename=str(path))
    except SyntaxError as e:
        raise ProblemError(f"{path}: syntax error at line {e.lineno}: {e.msg}") from None
    ref_defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.lineno < sep}
    tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.lineno > sep and n.name.startswith("test_")]
    if not ref_defs:
        raise ProblemError(f"{path}: no reference function above the separator line {sep}")
    if not tests:
        raise ProblemError(f"{path}: no test_<task>() function below the separator line {sep}")
    test = next((t for t in tests if t.name == f"test_{path.stem}"), tests[0])
    called = {n.func.id for n in ast.walk(test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    fns = [n for n in ref_defs if n in called]
    if not fns:
        raise ProblemError(f"{path}: {test.name}() calls none of the reference functions {', '.join(ref_defs)}")
    fn = path.stem if path.stem in fns else fns[0]
    args = ref_defs[fn].args
    if args.posonlyargs or args.vararg:
        raise ProblemError(f"{path}: {fn}() takes positional-only or *args parameters; aka passes inputs "
                           "by name, so this task is not supported")
    sites, skipped = call_sites(test, fn)
    if not sites:
        raise ProblemError(f"{path}: {test.name}() has no call of {fn}() outside try blocks")
    shapes = {}
    for i, (line, bind, key) in enumerate(sites):
        shown = ",".join(f"{k}={v}" for k, v in bind.items())
        label = " ".join(x for x in (key or f"L{line}", shown) if x)
        shapes[str(i)] = ShapeCase(str(i), {}, {"line": line, "bind": bind},
                                   {"label": label, "description": f"{test.name}() line {line}"
                                    + (f", {shown}" if shown else "")})
    meta = {"name": path.stem, "source": "kernelbench-x", "function": fn, "test": test.name,
            "separator_line": sep, "mutates": mutated_params(ref_defs[fn]),
            "kbx": {"skipped": skipped, "candidate_functions": candidate_functions(fn, path.stem)}}
    if path.parent.name in CATEGORIES:
        meta["category"] = path.parent.name
    # KernelBench-X's test tensors are small (the largest input of its 184 tasks is 4 MiB,
    # results/external_suites.md), so the CPU set is the benchmark set.
    return Problem(path.stem, "kbx", path.parent, path, None, meta, shapes, dict(shapes))


def candidate_functions(fn: str, stem: str) -> list[str]:
    """Function names a candidate may define, in the order they are looked for."""
    return list(dict.fromkeys([fn, "kernel_function", stem]))


def call_sites(test: ast.FunctionDef, fn: str) -> tuple[list[tuple[int, dict, str | None]], dict]:
    """(line, loop binding, results key) per shape, and counts of the calls left out."""
    out: list = []
    skipped = {"in_try": 0, "outlier_mode": 0, "nested_function": 0}

    def visit(node, loops, in_try):
        if isinstance(node, ast.For):
            loop = _loop(node)
            for child in node.body:
                visit(child, loops + [loop], in_try)
            for child in node.orelse:
                visit(child, loops, in_try)
            return
        if isinstance(node, ast.Try):
            for child in node.body + [h for h in node.handlers] + node.orelse + node.finalbody:
                visit(child, loops, True)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            skipped["nested_function"] += sum(1 for n in ast.walk(node) if _is_call(n, fn))
            return
        if _is_call(node, fn):
            if in_try:
                skipped["in_try"] += 1
            else:
                key = _results_key(node, parents)
                for bind in _bindings(loops, skipped):
                    out.append((node.lineno, bind, key))
        for child in ast.iter_child_nodes(node):
            visit(child, loops, in_try)

    parents = {c: p for p in ast.walk(test) for c in ast.iter_child_nodes(p)}
    for stmt in test.body:
        visit(stmt, [], False)
    return out, skipped


def _is_call(node, fn: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == fn


def _results_key(call: ast.Call, parents: dict) -> str | None:
    """`results["test_case_1"] = fn(...)` -> "test_case_1" (a label only)."""
    p = parents.get(call)
    if isinstance(p, ast.Assign) and len(p.targets) == 1 and isinstance(p.targets[0], ast.Subscript):
        k = p.targets[0].slice
        if isinstance(k, ast.Constant) and isinstance(k.value, str):
            return k.value
    return None


def _loop(node: ast.For) -> dict:
    """A for loop as {"names": [...], "values": [...] | None, "draw": bool}."""
    t = node.target
    names = [t.id] if isinstance(t, ast.Name) else (
        [e.id for e in t.elts] if isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts) else None)
    values = None
    try:
        values = list(ast.literal_eval(node.iter))
    except (ValueError, TypeError, SyntaxError):
        it = node.iter
        if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and not it.keywords):
            try:
                values = list(range(*[ast.literal_eval(a) for a in it.args]))
            except (ValueError, TypeError, SyntaxError):
                values = None
    read = {n.id for b in node.body for n in ast.walk(b) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    is_range = isinstance(node.iter, ast.Call) and getattr(node.iter.func, "id", "") == "range"
    draw = bool(is_range and names is not None and not (set(names) & read))
    if names is None or values is None:
        return {"names": [], "values": None, "draw": False}
    if len(names) > 1 and not all(isinstance(v, (tuple, list)) and len(v) == len(names) for v in values):
        return {"names": [], "values": None, "draw": False}
    return {"names": names, "values": values, "draw": draw}


def _bindings(loops: list[dict], skipped: dict) -> list[dict]:
    """The loop-variable values of each shape a call makes (outer loops first)."""
    choices = []
    for loop in loops:
        if loop["values"] is None or loop["draw"] or not loop["values"]:
            choices.append([{}])  # not unrolled: the first iteration the test reaches
            continue
        opts = []
        for v in loop["values"]:
            if len(loop["names"]) == 1 and v == "outlier":
                skipped["outlier_mode"] += 1
                continue
            vals = [v] if len(loop["names"]) == 1 else list(v)
            opts.append({n: _jsonable(x) for n, x in zip(loop["names"], vals)})
        choices.append(opts or [{}])
    return [dict(itertools.chain.from_iterable(d.items() for d in combo)) for combo in itertools.product(*choices)]


def _jsonable(v):
    return [_jsonable(x) for x in v] if isinstance(v, (tuple, list)) else v


def mutated_params(fn: ast.FunctionDef) -> list[str]:
    """Parameters the reference may write in place (see the module docstring)."""
    params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    out = {p for p in params if p == "out"}
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            f = n.func
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in params
                    and f.attr.endswith("_") and not f.attr.startswith("_")):
                out.add(f.value.id)
            for k in n.keywords:
                if k.arg == "out" and isinstance(k.value, ast.Name) and k.value.id in params:
                    out.add(k.value.id)
                if k.arg == "inplace" and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id in params:
                    out.add(n.args[0].id)
        elif isinstance(n, (ast.Assign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in params:
                    out.add(t.value.id)
    return sorted(out)

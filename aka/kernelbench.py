"""KernelBench single files (`Model`, `get_inputs()`, `get_init_inputs()`) and their small shape.

KernelBench sizes its tensors with module-level constants (`batch_size = 16`, `dim = 16384`,
`input_shape = (32768,)`) that `get_inputs()` reads when called; level 1's defaults make inputs of
6-8 GB, which the CPU interpreter cannot run. The small shape ("s0", `--shapes small`) overrides
those constants: read statically here (nothing of the file runs in this process), halving the
largest constant of the largest input until every input made by a `torch.rand/randn/zeros/ones/
empty/full/randint` call in `get_inputs()` has at most SMALL_ELEMENTS elements. Constants derived
from others (`groups = in_channels`, `N = 2048 * 2`) are recomputed from the scaled ones, so their
relations hold. Constants that no input's size depends on (kernel_size, stride, dim indices) are
never touched, and none goes below SMALL_FLOOR (a 7x7 kernel with dilation 2 still fits). Where
the sizes cannot be read (a size computed by a helper, a loop) or stay too large at the floor,
the problem has no small shape and `--shapes small` says why. The worker sets the overridden
constants on the imported module before calling get_init_inputs/get_inputs
(aka/evaluate/loader.py).
"""
from __future__ import annotations

import ast
import math
from pathlib import Path

from aka.util import parse_py

SMALL_ELEMENTS = 1 << 20  # 4 MiB of fp32 per input: well under a second per draw in the interpreter
SMALL_FLOOR = 16
_SIZED = {"rand", "randn", "zeros", "ones", "empty"}  # sizes are the positional arguments
_SIZE_ARG = {"randint": 2, "full": 0}                 # sizes are one positional argument


class NoSmallShape(ValueError):
    """Why a KernelBench file has no small shape (one line)."""


def load_kernelbench(path: Path):
    from aka.problem import Problem, ProblemError, ShapeCase
    if path.suffix != ".py":
        raise ProblemError(f"{path}: a problem file must be a KernelBench .py file or an operator directory")
    try:
        tree = parse_py(path.read_text(), filename=str(path))
    except SyntaxError as e:
        raise ProblemError(f"{path}: syntax error at line {e.lineno}: {e.msg}") from None
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    need = {"Model", "get_inputs", "get_init_inputs"}
    if not need <= names:
        raise ProblemError(f"{path}: a KernelBench problem needs {', '.join(sorted(need - names))}")
    shape = ShapeCase("0", {}, {}, {"description": "KernelBench get_inputs()"})
    meta: dict = {"name": path.stem}
    try:
        small = small_shape(tree)
    except NoSmallShape as e:
        small, meta["no_small_shape"] = {}, str(e)
    return Problem(path.stem, "kernelbench", path.parent, path, None, meta, {"0": shape}, small)


def small_shape(tree: ast.Module) -> dict:
    """{"0": the default shape} when it is already small, else {"s0": the scaled one}."""
    from aka.problem import ShapeCase
    consts = _module_constants(tree)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs")
    base, tdeps = _literal_units(tree, consts), _constant_deps(tree)
    cur = dict(base)
    for _ in range(64 * max(1, len(base))):
        env = _evaluate(tree, cur)
        sizes = _input_sizes(fn, env, tdeps)
        if not sizes:
            raise NoSmallShape("get_inputs() makes no tensor with torch.rand/randn/zeros/ones/empty/full/randint "
                               "whose size aka can read")
        numel, deps, line = max(sizes, key=lambda s: s[0])
        if numel <= SMALL_ELEMENTS:
            break
        # sorted: a tie (height = width = 224) halves the same constant in every process
        movable = sorted((u for u in deps if u in cur and cur[u] > min(base[u], SMALL_FLOOR)), key=str)
        if not movable:
            at = ", ".join(_unit_name(u) for u in sorted(deps, key=str)) or "no module-level constant"
            raise NoSmallShape(f"the input made at line {line} keeps {numel:,} elements with its sizes "
                               f"({at}) at the floor of {SMALL_FLOOR}")
        u = max(movable, key=lambda u: cur[u])
        cur[u] = max(min(base[u], SMALL_FLOOR), cur[u] // 2)
    if cur == base:
        return {"0": ShapeCase("0", {}, {}, {"description": "KernelBench get_inputs(): already small "
                                             f"({numel:,} elements in the largest input)"})}
    env0, env = _evaluate(tree, base), _evaluate(tree, cur)
    changed = {k: env[k] for k in consts if env.get(k) != env0.get(k)}
    said = ", ".join(f"{k} {_show(env0[k])}->{_show(v)}" for k, v in changed.items())
    info = {"label": ",".join(f"{k}={_show(v)}" for k, v in changed.items()),
            "description": f"KernelBench get_inputs() with module constants scaled: {said} "
                           f"(largest input {numel:,} elements)", "scaled": said}
    return {"s0": ShapeCase("s0", {}, {"constants": {k: _jsonable(v) for k, v in changed.items()}}, info)}


def _show(v) -> str:
    return str(tuple(v)) if isinstance(v, (tuple, list)) else str(v)


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


def _unit_name(u) -> str:
    return f"{u[0]}[{u[1]}]" if isinstance(u, tuple) else u


def _assignments(tree: ast.Module):
    """(name, value) of module-level `NAME = value`, `a = b = value` and `a, b = 1, 2`, in order."""
    for n in tree.body:
        if not isinstance(n, ast.Assign):
            continue
        for t in n.targets:
            if isinstance(t, ast.Name):
                yield t.id, n.value
            elif (isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple) and len(t.elts) == len(n.value.elts)
                  and all(isinstance(e, ast.Name) for e in t.elts)):
                yield from ((e.id, v) for e, v in zip(t.elts, n.value.elts))


def _module_constants(tree: ast.Module) -> list[str]:
    return [name for name, _ in _assignments(tree)]


def _literal_units(tree: ast.Module, consts: list[str]) -> dict:
    """The scalable units: module constants that are a positive int literal (`dim = 16384`), and
    the int elements of a tuple literal (`input_shape = (32768,)` -> ("input_shape", 0))."""
    units: dict = {}
    for name, v in _assignments(tree):
        if _is_literal_int(v):
            units[name] = _value(v, {})
        elif isinstance(v, ast.Tuple) and v.elts and all(_is_literal_int(e) for e in v.elts):
            units.update({(name, i): _value(e, {}) for i, e in enumerate(v.elts)})
    return {u: x for u, x in units.items() if x > 0}


def _is_literal_int(node) -> bool:
    """An int literal or arithmetic on int literals only (`M = 16384 * 2`)."""
    return (not any(isinstance(n, ast.Name) for n in ast.walk(node))
            and type(_value(node, {})) is int)


def _evaluate(tree: ast.Module, units: dict) -> dict:
    """Module constants in order, with the scalable units' values replaced by `units`."""
    env: dict = {}
    for name, value in _assignments(tree):
        if name in units:
            env[name] = units[name]
        elif (name, 0) in units:
            env[name] = tuple(units[(name, i)] for i in range(len(value.elts)))
        else:
            val = _value(value, env)
            if val is not None:
                env[name] = val
    return env


def _value(node, env):
    """Ints, floats, tuples and + - * // ** of them; None for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        vals = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                v = _value(e.value, env)
                if not isinstance(v, tuple):
                    return None
                vals.extend(v)
            else:
                v = _value(e, env)
                if v is None:
                    return None
                vals.append(v)
        return tuple(vals)
    if isinstance(node, ast.BinOp):
        a, b = _value(node.left, env), _value(node.right, env)
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            return None
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b if b else None, ast.Pow: lambda: a ** b if abs(b) < 8 else None}
        f = ops.get(type(node.op))
        return f() if f else None
    return None


def _deps(node, local_deps: dict, tree_deps: dict) -> set:
    """The scalable units a size expression depends on, through locals and derived constants."""
    out: set = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out |= local_deps.get(n.id, tree_deps.get(n.id, set()))
    return out


def _constant_deps(tree: ast.Module) -> dict:
    deps: dict = {}
    for name, v in _assignments(tree):
        if _is_literal_int(v):
            deps[name] = {name}
        elif isinstance(v, ast.Tuple) and v.elts and all(_is_literal_int(e) for e in v.elts):
            deps[name] = {(name, i) for i in range(len(v.elts))}
        else:
            deps[name] = _deps(v, {}, deps)
    return deps


def _input_sizes(fn: ast.FunctionDef, env: dict, tree_deps: dict) -> list[tuple[int, set, int]]:
    """(elements, units it depends on, line) of every sized tensor factory call in get_inputs()."""
    local_env, local_deps, out = dict(env), {}, []
    for stmt in fn.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            val = _value(stmt.value, local_env)
            name = stmt.targets[0].id
            if val is not None:
                local_env[name] = val
            local_deps[name] = _deps(stmt.value, local_deps, tree_deps)
        for call in ast.walk(stmt):
            size = _factory_size(call)
            if size is None:
                continue
            dims = _value(ast.Tuple(elts=size, ctx=ast.Load()), local_env)
            if dims is not None and len(dims) == 1 and isinstance(dims[0], tuple):
                dims = dims[0]  # torch.randn((a, b)) as well as torch.randn(a, b)
            if dims is None or not all(isinstance(d, int) for d in dims):
                raise NoSmallShape(f"get_inputs() line {call.lineno}: the size of {ast.unparse(call)[:60]} "
                                   "is not made of module-level constants aka can read")
            out.append((math.prod(dims), _deps(ast.Tuple(elts=size, ctx=ast.Load()), local_deps, tree_deps),
                        call.lineno))
    return out


def _factory_size(call) -> list | None:
    """The size arguments of `torch.<factory>(...)`, as a list of expressions."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "torch"):
        return None
    name = call.func.attr
    kw = {k.arg: k.value for k in call.keywords}
    if name in _SIZED:
        return [kw["size"]] if "size" in kw else list(call.args)
    if name in _SIZE_ARG:
        i = _SIZE_ARG[name]
        return [kw["size"]] if "size" in kw else ([call.args[i]] if len(call.args) > i else None)
    return None

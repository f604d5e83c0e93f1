"""Static check of a candidate's source, before anything of it runs.

Each rule has an id and a one-line rationale; a violation rejects the candidate (status
`rejected`, or `compile_error` for a syntax error). The rules are deliberately strict: a candidate
is a Triton kernel plus launch glue, and nothing legitimate needs files, threads, frames or
monkey-patching. The dynamic checks in the worker back them up (fallback detection, guarded
functions, fresh inputs), so a rule missing here is not the only line of defence.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from aka.util import parse_py

# Imports a kernel file may make; everything else is refused (rule `import`).
ALLOWED_IMPORTS = {
    "torch", "torch.nn", "torch.nn.functional", "triton", "triton.language",
    "triton.language.extra", "triton.language.extra.libdevice", "triton.language.extra.cuda",
    "triton.language.extra.cuda.libdevice", "triton.tools.tensor_descriptor",
    "math", "functools", "typing", "dataclasses", "itertools", "enum", "__future__",
}

RULES: dict[str, str] = {
    "syntax": "the file must parse as Python",
    "no-model": "the candidate must define class ModelNew (or Model) with the reference's signatures (a KernelBench-X candidate: or kernel_function / the task's function)",
    "no-kernel": "the candidate must define at least one @triton.jit kernel: PyTorch is allowed for glue only",
    "import": "only torch, triton and small stdlib helpers may be imported: no os/sys/io/threads/ctypes/numpy, no importing the reference or the harness",
    "builtin": "no eval/exec/compile/open/getattr/setattr/globals/vars/__import__: they read files, hide code or reach into the harness",
    "dunder": "no dunder attribute access beyond __init__: frames, globals, __dict__ and __class__ are how a kernel reaches the harness",
    "monkeypatch": "no assignment to attributes of anything but self: patching torch, triton, timers or the profiler falsifies the measurement",
    "torch-compile": "no torch.compile, dynamo or inductor: the kernel must be the candidate's own Triton, not the compiler's",
    "stream": "no side streams or stream switching: work on another stream escapes the timer and races the correctness check",
    "rng": "no seeding or RNG state access: a candidate that can predict the inputs can precompute outputs",
    "global-state": "no torch.backends/default-dtype/deterministic switches: they change how the reference itself computes",
    "host-compute": "no .numpy()/.tolist()/from_numpy: computing on the host hides a fallback from the profiler",
    "io": "no torch.save/torch.load/from_file or cpp/cuda extensions: the candidate reads nothing and compiles only Triton",
    "profiler": "no profiler, testing or timer access: the candidate must not see or steer the measurement",
    "launch-hook": "no pre/post launch hooks: Python run inside a launch escapes the fallback check",
    "kernel-call": "a @triton.jit body calls only triton/tl, other jit functions and a few builtins: under the interpreter anything else runs as plain Python",
    "string-dunder": "no strings naming dunders: string-keyed attribute access is how a kernel reaches frames and globals",
    "module-table": "no sys/os/builtins/importlib/gc/... reached as attributes of allowed modules (torch.sys.modules): that is the route to the interpreter's module table and every harness name in it",
}

BANNED_CALLS = {
    "eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "setattr",
    "delattr", "getattr", "breakpoint", "input", "exit", "quit", "help", "memoryview",
    "get_type_hints", "ForwardRef", "attrgetter", "methodcaller",
}
HOOK_NAMES = {"add_pre_run_hook", "pre_run_hooks", "pre_hook", "post_hook", "launch_enter_hook",
              "launch_exit_hook"}
# what a jit body may call besides tl/triton functions and other jit functions
KERNEL_BUILTINS = {"range", "min", "max", "len", "int", "float", "bool", "isinstance", "print", "abs"}
# tensor methods Triton's language defines (x.to(...), acc.reshape(...))
KERNEL_METHODS = {"to", "reshape", "trans", "permute", "broadcast_to", "expand_dims", "view", "split",
                  "ravel", "sum", "max", "min", "argmax", "argmin", "cast", "item", "__getitem__",
                  "advance", "load", "store", "dtype", "abs", "exp", "log", "sqrt", "sigmoid", "softmax",
                  "cumsum", "flip", "sort", "xor_sum", "reduce", "histogram", "join", "interleave",
                  "associative_scan", "atomic_add", "atomic_max", "atomic_min", "atomic_cas",
                  "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "gather", "with_type",
                  "is_block", "element_ty", "make_block_ptr"}
ALLOWED_DUNDERS = {"__init__", "__name__"}

# attribute name -> rule, for attributes that are suspicious wherever they appear
BANNED_ATTRS = {
    "compile": "torch-compile", "_dynamo": "torch-compile", "_inductor": "torch-compile",
    "Stream": "stream", "stream": "stream", "set_stream": "stream", "ExternalStream": "stream",
    "manual_seed": "rng", "seed": "rng", "set_rng_state": "rng", "get_rng_state": "rng",
    "Generator": "rng", "manual_seed_all": "rng", "default_generator": "rng", "initial_seed": "rng",
    "backends": "global-state", "set_default_dtype": "global-state", "set_default_device": "global-state",
    "use_deterministic_algorithms": "global-state", "set_flush_denormal": "global-state",
    "set_float32_matmul_precision": "global-state", "knobs": "global-state",
    "numpy": "host-compute", "tolist": "host-compute", "from_numpy": "host-compute",
    "from_file": "io", "cpp_extension": "io", "load_inline": "io", "_C": "io", "cudart": "io",
    "profiler": "profiler", "testing": "profiler", "Event": "profiler",
    **{name: "module-table" for name in (
        "sys", "modules", "os", "builtins", "subprocess", "importlib", "ctypes", "gc", "inspect", "socket",
        "shutil", "signal", "threading", "multiprocessing", "_sys", "_os", "posix", "resource", "mmap")},
}
# attributes banned only on the torch module itself (`tl.load` is the heart of every kernel)
BANNED_TORCH_ATTRS = {"load": "io", "save": "io", "ops": "io", "library": "io", "hub": "io"}


@dataclass
class Violation:
    rule: str
    line: int
    detail: str

    def __str__(self) -> str:
        return f"line {self.line}: [{self.rule}] {self.detail} ({RULES[self.rule]})"


@dataclass
class StaticReport:
    ok: bool
    violations: list[Violation]
    model_class: str | None
    kernels: list[str]
    syntax_error: str | None = None

    def summary(self, limit: int = 5) -> str:
        if self.syntax_error:
            return self.syntax_error
        lines = [str(v) for v in self.violations[:limit]]
        more = len(self.violations) - limit
        return "; ".join(lines) + (f"; and {more} more" if more > 0 else "")


def _is_jit_decorator(d: ast.expr) -> bool:
    node = d.func if isinstance(d, ast.Call) else d
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name in {"jit", "autotune", "heuristics"}


def check_source(source: str, filename: str = "candidate.py", functions: list[str] | tuple = ()) -> StaticReport:
    """`functions`: names of module-level functions that may stand in for class ModelNew/Model
    (a KernelBench-X problem's `kernel_function` or task function: Problem.candidate_functions)."""
    try:
        tree = parse_py(source, filename=filename)
    except SyntaxError as e:
        msg = f"SyntaxError at line {e.lineno}: {e.msg}"
        return StaticReport(False, [Violation("syntax", e.lineno or 0, e.msg)], None, [], msg)
    v: list[Violation] = []

    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    model = "ModelNew" if "ModelNew" in classes else ("Model" if "Model" in classes else None)
    if model is None and functions:
        defined = _module_functions(tree)
        model = next((f for f in functions if f in defined), None)
    if model is None:
        also = f" nor function {' / '.join(functions)}" if functions else ""
        v.append(Violation("no-model", 1, f"no class ModelNew or Model{also} at module level"))
    kernels = [n.name for n in ast.walk(tree)
               if isinstance(n, ast.FunctionDef) and any(_is_jit_decorator(d) for d in n.decorator_list)]
    if not kernels:
        v.append(Violation("no-kernel", 1, "no function decorated with @triton.jit"))

    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    builtin_refs = {id(n) for n in _builtin_references(tree, BANNED_CALLS)}
    v += _kernel_calls(tree, set(kernels))
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name not in ALLOWED_IMPORTS:
                    v.append(Violation("import", line, f"import {a.name}"))
        elif isinstance(node, ast.ImportFrom):
            mod = "." * node.level + (node.module or "")
            if node.level or mod not in ALLOWED_IMPORTS:
                v.append(Violation("import", line, f"from {mod} import ..."))
        elif isinstance(node, ast.Name):
            if id(node) in builtin_refs:
                v.append(Violation("builtin", line, node.id))
            elif node.id.startswith("__") and node.id.endswith("__") and node.id not in ALLOWED_DUNDERS:
                v.append(Violation("dunder", line, node.id))
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("__") and node.attr not in ALLOWED_DUNDERS:
                v.append(Violation("dunder", line, f".{node.attr}"))
            elif node.attr in HOOK_NAMES:
                v.append(Violation("launch-hook", line, f".{node.attr}"))
            elif node.attr in BANNED_ATTRS:
                v.append(Violation(BANNED_ATTRS[node.attr], line, f".{node.attr}"))
            elif (node.attr in BANNED_TORCH_ATTRS and isinstance(node.value, ast.Name)
                  and node.value.id == "torch"):
                v.append(Violation(BANNED_TORCH_ATTRS[node.attr], line, f"torch.{node.attr}"))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for sub in _store_targets(t):
                    if not (_is_self_field(sub) and _in_method(node, parents)):
                        v.append(Violation("monkeypatch", line, f"assignment to {ast.unparse(sub)}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.search(r"__\w+__", node.value) and not _is_docstring(node, parents):
                v.append(Violation("string-dunder", line, repr(node.value[:40])))
        elif isinstance(node, ast.keyword) and node.arg in HOOK_NAMES:
            v.append(Violation("launch-hook", line, f"{node.arg}="))
        elif isinstance(node, ast.Global):
            pass  # module-level caches are caught dynamically (fresh inputs every draw)
    # de-duplicate (a.b.c yields nested Attribute nodes)
    seen, uniq = set(), []
    for x in v:
        key = (x.rule, x.line, x.detail)
        if key not in seen:
            seen.add(key)
            uniq.append(x)
    return StaticReport(not uniq, uniq, model, kernels)


def _module_functions(tree: ast.Module) -> set[str]:
    """Names a module-level `def` or plain assignment binds (`kernel_function = relu_triton`)."""
    out = set()
    for n in tree.body:
        if isinstance(n, ast.FunctionDef):
            out.add(n.name)
        elif isinstance(n, ast.Assign):
            out |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None:
            out.add(n.target.id)
    return out


def _store_targets(t: ast.AST):
    """The attribute targets an assignment writes: `a.b = ...`, `a.b[i] = ...`, tuple targets."""
    if isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            yield from _store_targets(e)
    elif isinstance(t, ast.Attribute):
        yield t
    elif isinstance(t, ast.Subscript):
        base = t.value
        while isinstance(base, ast.Subscript):
            base = base.value
        if isinstance(base, ast.Attribute):
            yield base
    elif isinstance(t, ast.Starred):
        yield from _store_targets(t.value)


def _is_self_field(node: ast.Attribute) -> bool:
    """`self.x` exactly: deeper chains (`self.T.detach = ...`) patch whatever self.x holds."""
    return isinstance(node.value, ast.Name) and node.value.id == "self"


def _in_method(node: ast.AST, parents: dict) -> bool:
    """Inside a function defined directly in a class body (so `self` is the module instance)."""
    cur = parents.get(node)
    while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
        cur = parents.get(cur)
    return cur is not None and isinstance(parents.get(cur), ast.ClassDef) and bool(cur.args.args) \
        and cur.args.args[0].arg == "self"


def _is_docstring(node: ast.Constant, parents: dict) -> bool:
    expr = parents.get(node)
    return isinstance(expr, ast.Expr) and isinstance(parents.get(expr), (ast.Module, ast.ClassDef, ast.FunctionDef))


def _triton_aliases(tree: ast.Module) -> set[str]:
    names = {"tl", "triton", "libdevice"}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in n.names if a.name.startswith("triton")}
        elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("triton"):
            names |= {a.asname or a.name for a in n.names}
    return names


def _kernel_calls(tree: ast.Module, kernels: set[str]) -> list[Violation]:
    aliases, out = _triton_aliases(tree), []
    for fn in ast.walk(tree):
        if not (isinstance(fn, ast.FunctionDef) and fn.name in kernels):
            continue
        for call in ast.walk(fn):
            if not isinstance(call, ast.Call):
                continue
            f = call.func
            if isinstance(f, ast.Name):
                ok = f.id in kernels or f.id in KERNEL_BUILTINS or f.id in aliases
            elif isinstance(f, ast.Attribute):
                root = f.value
                while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
                    root = root.func if isinstance(root, ast.Call) else root.value
                ok = (isinstance(root, ast.Name) and root.id in aliases) or f.attr in KERNEL_METHODS
            else:
                ok = False
            if not ok:
                out.append(Violation("kernel-call", call.lineno, f"{ast.unparse(f)}(...) inside @triton.jit {fn.name}"))
    return out


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
           ast.GeneratorExp)


def _bindings(scope: ast.AST) -> tuple[set[str], set[str]]:
    """Names a function, lambda or comprehension scope binds (parameters, assignment/for/with/
    except targets, imports, nested def and class names) less those it declares `global`, and the
    `global` names; nested scopes are not entered."""
    bound, declared_global = set(), set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = scope.args
        bound |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        bound |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
        body = [scope.body] if isinstance(scope, ast.Lambda) else scope.body
    else:
        body = [g.target for g in scope.generators]
    stack = list(body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            bound.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
            continue  # its body is its own scope
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
        elif isinstance(n, ast.Global):
            declared_global |= set(n.names)
        elif isinstance(n, _SCOPES):
            continue
        stack.extend(ast.iter_child_nodes(n))
    return bound - declared_global, declared_global


def _builtin_references(tree: ast.Module, names: set[str]) -> list[ast.Name]:
    """The uses of `names` that resolve to Python's builtins. A parameter or local of a function,
    lambda or comprehension that shadows one (`def forward(self, input)`: 116 of KernelBench-X's
    184 references name a parameter `input`) is the candidate's own value, not the builtin.
    Module-level and class-level bindings do not shadow here: `eval = eval` at module level is the
    builtin under another binding, while a function-level `eval = eval` cannot run (the local is
    unbound when read). Python's resolution otherwise: enclosing function scopes out to the
    module, class bodies invisible to their methods; decorators, defaults and annotations belong
    to the enclosing scope."""
    found: list[ast.Name] = []

    def visit(node: ast.AST, chain: tuple[set[str], ...]) -> None:
        if isinstance(node, ast.Name):
            if node.id in names and not any(node.id in b for b in chain):
                found.append(node)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            outer = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
            if not isinstance(node, ast.Lambda):
                outer += node.decorator_list + ([node.returns] if node.returns else [])
                outer += [a.annotation for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                          if a.annotation is not None]
            for n in outer:
                visit(n, chain)
            inner = _bindings(node)[0]
            for n in ([node.body] if isinstance(node, ast.Lambda) else node.body):
                visit(n, chain + (inner,))
            return
        if isinstance(node, ast.ClassDef):
            for n in node.decorator_list + node.bases + [k.value for k in node.keywords]:
                visit(n, chain)
            for n in node.body:
                visit(n, chain)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            visit(node.generators[0].iter, chain)  # evaluated in the enclosing scope
            inner = chain + (_bindings(node)[0],)
            for i, g in enumerate(node.generators):
                for n in ([] if i == 0 else [g.iter]) + g.ifs + [g.target]:
                    visit(n, inner)
            for n in ([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]):
                visit(n, inner)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, chain)

    for stmt in tree.body:
        visit(stmt, ())
    return found

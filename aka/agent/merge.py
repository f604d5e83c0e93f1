"""Several candidate files in one module: each variant's source kept as written, its module-level
names prefixed so that two variants' `_gemm_kernel`, `AKA_PARAMS` or `ModelNew` cannot collide.

Only names that resolve to the module's own bindings are renamed, found by scope (a kernel
parameter `BLOCK_M` stays `BLOCK_M` even where the module also binds `BLOCK_M`; keyword names at
call sites and attributes are never touched), and the text is rewritten at the AST's positions, so
comments and layout survive. Names bound by imports are shared, not renamed: two variants that
bind one import name to different modules cannot be merged (MergeError). `from __future__`
imports are hoisted to the top of the merged module.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from aka.util import parse_py


class MergeError(ValueError):
    """A variant this merge cannot rename safely; the message says which construct."""


@dataclass
class Renamed:
    source: str                 # the variant's text with its module-level names prefixed
    names: dict[str, str]       # old -> new, every module-level binding that was renamed
    imports: dict[str, str]     # import-bound name -> what it binds (`tl` -> triton.language)
    future: list[str]           # `from __future__ import ...` lines taken out


def _module_bindings(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """(names bound at module level other than by imports, import-bound name -> dotted target)."""
    names, imports = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            for a in node.names:
                bound = a.asname or a.name.split(".")[0]
                if a.name == "*":
                    raise MergeError(f"line {node.lineno}: `from ... import *` binds unknown names")
                if isinstance(node, ast.ImportFrom):
                    imports[bound] = f"{'.' * node.level}{node.module or ''}.{a.name}"
                else:
                    imports[bound] = a.name if a.asname else a.name.split(".")[0]
            continue
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) and sub is not node:
                continue
            if isinstance(sub, (ast.Global, ast.Nonlocal)):
                raise MergeError(f"line {sub.lineno}: `global`/`nonlocal` declarations are not merged")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        else:
            names |= {n.id for n in _stores_in_scope(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            raise MergeError(f"line {node.lineno}: `global` declarations are not merged")
    return names, imports


def _stores_in_scope(node: ast.AST):
    """Name nodes stored by `node` in the scope it belongs to (not inside nested scopes)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            yield n
        for child in ast.iter_child_nodes(n):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                                  ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                continue
            stack.append(child)


def _function_locals(fn) -> set[str]:
    a = fn.args
    out = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    out |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    for stmt in body:
        out |= {n.id for n in _stores_in_scope(stmt)}
        for sub in [stmt, *_nested_heads(stmt)]:
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(sub.name)
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                out |= {x.asname or x.name.split(".")[0] for x in sub.names}
            if isinstance(sub, ast.ExceptHandler) and sub.name:
                out.add(sub.name)
    return out


def _nested_heads(node: ast.AST):
    """Statements under `node` in its own scope (nested defs themselves, not their bodies)."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                              ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            stack.extend(ast.iter_child_nodes(n))


class _Finder(ast.NodeVisitor):
    """Collects the Name nodes (and def/class headers) that refer to module-level bindings."""

    def __init__(self, targets: set[str]):
        self.targets = targets
        self.scopes: list[set[str]] = []   # enclosing function/comprehension scopes, innermost last
        self.names: list[ast.Name] = []
        self.headers: list[ast.AST] = []
        self.in_class = 0
        self.class_level = False  # directly in a class body: its stores are class attributes

    def global_here(self, name: str) -> bool:
        return name in self.targets and not any(name in s for s in self.scopes)

    def visit_Name(self, node: ast.Name) -> None:
        if self.class_level and not isinstance(node.ctx, ast.Load):
            return
        if self.global_here(node.id):
            self.names.append(node)

    def _function(self, node) -> None:
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        a = node.args
        for default in a.defaults + [d for d in a.kw_defaults if d is not None]:
            self.visit(default)
        for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
            if arg.annotation is not None:
                self.visit(arg.annotation)
        if getattr(node, "returns", None) is not None:
            self.visit(node.returns)
        if not isinstance(node, ast.Lambda) and not self.scopes and not self.in_class and node.name in self.targets:
            self.headers.append(node)
        self.scopes.append(_function_locals(node))
        was, self.class_level = self.class_level, False
        for stmt in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(stmt)
        self.class_level = was
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for x in node.decorator_list + node.bases + [k.value for k in node.keywords]:
            self.visit(x)
        if not self.scopes and not self.in_class and node.name in self.targets:
            self.headers.append(node)
        self.in_class += 1
        # A class body reads module names directly, but its own assignments shadow them there.
        own = set()
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.visit(stmt)
                continue
            if isinstance(stmt, ast.ClassDef):
                raise MergeError(f"line {stmt.lineno}: nested classes are not merged")
            self.scopes.append(set(own))
            self.class_level = True
            self.visit(stmt)
            self.class_level = False
            self.scopes.pop()
            own |= {n.id for n in _stores_in_scope(stmt)}
        self.in_class -= 1

    def _comprehension(self, node) -> None:
        first = node.generators[0]
        self.visit(first.iter)  # evaluated in the enclosing scope
        local = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        self.scopes.append(local)
        was, self.class_level = self.class_level, False
        self.visit(first.target)
        for cond in first.ifs:
            self.visit(cond)
        for g in node.generators[1:]:
            self.visit(g)
        for part in ("elt", "key", "value"):
            if getattr(node, part, None) is not None:
                self.visit(getattr(node, part))
        self.class_level = was
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension


def _header_span(lines: list[str], node) -> tuple[int, int, int]:
    """(line index, start col, end col) of the name in `def NAME` / `class NAME`."""
    kw = "class" if isinstance(node, ast.ClassDef) else "def"
    for i in range(node.lineno - 1, min(len(lines), node.lineno + 2)):
        m = re.search(rf"\b{kw}\s+({re.escape(node.name)})\b", lines[i])
        if m:
            return i, m.start(1), m.end(1)
    raise MergeError(f"line {node.lineno}: cannot find the header of {node.name}")


def rename(source: str, prefix: str) -> Renamed:
    """The variant with every module-level (non-import) name `x` renamed to `prefix + x`."""
    tree = parse_py(source)
    targets, imports = _module_bindings(tree)
    finder = _Finder(targets)
    future_nodes = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            future_nodes.append(node)
            continue
        finder.visit(node)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []  # (line index, start, end, text)
    for n in finder.names:
        if n.lineno != n.end_lineno:
            raise MergeError(f"line {n.lineno}: a name spanning lines")
        edits.append((n.lineno - 1, _char_col(lines[n.lineno - 1], n.col_offset),
                      _char_col(lines[n.lineno - 1], n.end_col_offset), prefix + n.id))
    for h in finder.headers:
        i, a, b = _header_span(lines, h)
        edits.append((i, a, b, prefix + h.name))
    for f in future_nodes:
        for i in range(f.lineno - 1, f.end_lineno):
            lines[i] = "# (hoisted) " + lines[i] if i == f.lineno - 1 else "# " + lines[i]
    for i, a, b, text in sorted(edits, key=lambda e: (e[0], -e[1])):
        if i < len(lines) and any(f.lineno - 1 <= i < f.end_lineno for f in future_nodes):
            continue
        lines[i] = lines[i][:a] + text + lines[i][b:]
    return Renamed("".join(lines), {t: prefix + t for t in sorted(targets)}, imports,
                   [ast.unparse(f) for f in future_nodes])


def _char_col(line: str, byte_col: int) -> int:
    """AST columns count UTF-8 bytes; string slicing counts characters."""
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def shared_imports(variants: list[Renamed], labels: list[str]) -> None:
    """Every import name must mean the same thing in every variant that binds it."""
    seen: dict[str, tuple[str, str]] = {}
    for v, label in zip(variants, labels):
        for name, stmt in v.imports.items():
            if name in seen and seen[name][0] != stmt:
                raise MergeError(f"`{name}` is {seen[name][0]} in {seen[name][1]} but {stmt} in {label}")
            seen.setdefault(name, (stmt, label))

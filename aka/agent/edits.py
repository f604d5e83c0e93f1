"""Turn a model's reply into candidate source: a whole file, or SEARCH/REPLACE edits of the parent.

Edit blocks (the parent is the kernel the prompt showed):

    <<<<<<< SEARCH
    exact lines from the parent
    =======
    their replacement
    >>>>>>> REPLACE

Every SEARCH text must occur exactly once in the parent (trailing whitespace is forgiven); blocks
apply in order. Whatever comes out must parse as Python and define `class ModelNew` before
anything runs; a reply that fails is a failed proposal with the reason, never an evaluation.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from aka.util import parse_py

_FENCE = re.compile(r"^```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_EDIT = re.compile(r"^<{5,9}[ \t]*SEARCH[ \t]*\n(.*?)^={5,9}[ \t]*\n(.*?)^>{5,9}[ \t]*REPLACE[ \t]*$",
                   re.DOTALL | re.MULTILINE)
_EDIT_MARK = re.compile(r"^(<{5,9}[ \t]*SEARCH|>{5,9}[ \t]*REPLACE)", re.MULTILINE)
_TECHNIQUES = re.compile(r"^[ \t*_#-]*techniques?[ \t*_]*:[ \t]*(.+)$", re.IGNORECASE | re.MULTILINE)
_PY_TAGS = {"", "python", "py", "python3"}


@dataclass
class ParsedReply:
    kind: str | None                 # "whole", "edit", or None when no candidate came out
    source: str | None = None
    error: str | None = None
    n_edits: int = 0
    techniques: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.source is not None and self.error is None


def validate_source(source: str) -> str | None:
    """None when the text parses and defines ModelNew at module level, else the reason."""
    try:
        tree = parse_py(source)
    except SyntaxError as e:
        return f"candidate does not parse: SyntaxError at line {e.lineno}: {e.msg}"
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return "candidate defines no class ModelNew at module level"
    return None


def techniques_of(text: str) -> list[str]:
    """Names from a `TECHNIQUES: a, b` line outside code blocks, lower-case, de-duplicated."""
    prose = _FENCE.sub("", text)
    out: list[str] = []
    for m in _TECHNIQUES.finditer(prose):
        for t in re.split(r"[,;]", m.group(1)):
            t = t.strip(" .`*_").lower().replace(" ", "-")
            if t and t not in out and len(t) <= 60:
                out.append(t)
    return out


def _python_blocks(text: str) -> list[str]:
    return [m.group(2) for m in _FENCE.finditer(text) if m.group(1).lower() in _PY_TAGS]


def _apply_one(source: str, search: str, replace: str, i: int) -> tuple[str | None, str | None]:
    if not search.strip():
        return None, f"edit block {i}: empty SEARCH text"
    count = source.count(search)
    if count == 1:
        return source.replace(search, replace, 1), None
    if count > 1:
        return None, f"edit block {i}: SEARCH text occurs {count} times in the parent; include more context"
    # Forgive trailing whitespace: match line sequences with rstrip()ed lines.
    src_lines, pat = source.splitlines(keepends=True), [ln.rstrip() for ln in search.splitlines()]
    stripped = [ln.rstrip() for ln in src_lines]
    hits = [k for k in range(len(stripped) - len(pat) + 1) if stripped[k:k + len(pat)] == pat]
    if len(hits) == 1:
        k = hits[0]
        rep = replace if replace.endswith("\n") or not replace else replace + "\n"
        return "".join(src_lines[:k]) + rep + "".join(src_lines[k + len(pat):]), None
    if len(hits) > 1:
        return None, f"edit block {i}: SEARCH text occurs {len(hits)} times in the parent; include more context"
    first = search.strip().splitlines()[0][:80]
    return None, f"edit block {i}: SEARCH text not found in the parent (starts {first!r})"


def apply_edits(parent: str, text: str) -> tuple[str | None, int, str | None]:
    blocks = list(_EDIT.finditer(text))
    source = parent
    for i, m in enumerate(blocks, 1):
        source, err = _apply_one(source, m.group(1), m.group(2), i)
        if err:
            return None, len(blocks), err
    return source, len(blocks), None


def parse_reply(text: str, parent: str | None, truncated: bool = False) -> ParsedReply:
    techniques = techniques_of(text)
    cut = " (the reply was cut off at max_tokens)" if truncated else ""
    if _EDIT_MARK.search(text):
        if not _EDIT.search(text):
            return ParsedReply(None, error="malformed SEARCH/REPLACE block: needs <<<<<<< SEARCH, "
                               "=======, >>>>>>> REPLACE lines" + cut, techniques=techniques)
        if parent is None:
            return ParsedReply(None, error="SEARCH/REPLACE edits but there is no parent kernel to edit; "
                               "send a whole file", techniques=techniques)
        source, n, err = apply_edits(parent, text)
        if err:
            return ParsedReply(None, error=err + cut, n_edits=n, techniques=techniques)
        bad = validate_source(source)
        return ParsedReply("edit", source, (bad + cut) if bad else None, n, techniques)
    blocks = _python_blocks(text)
    if not blocks:
        why = "reply contains no code: expected a ```python block or SEARCH/REPLACE edits"
        return ParsedReply(None, error=why + cut, techniques=techniques)
    with_model = [b for b in blocks if re.search(r"^class\s+ModelNew\b", b, re.MULTILINE)]
    source = with_model[-1] if with_model else max(blocks, key=len)
    bad = validate_source(source)
    return ParsedReply("whole", source, (bad + cut) if bad else None, 0, techniques)

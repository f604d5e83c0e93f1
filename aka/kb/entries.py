"""The knowledge base's file format: a note (`.md`) or a kernel file (`.py`, in its module
docstring) opens with a `---`-delimited YAML header, its front matter (knowledge_base/README.md
lists the fields: id, title, layer, ops, categories, techniques, symptoms, params, ...)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

from aka.util import parse_py

_FRONT = re.compile(r"\A\s*---[ \t]*\n(.*?)\n---[ \t]*\n?(.*)\Z", re.DOTALL)


def split_front_matter(text: str) -> tuple[dict, str]:
    """(front matter, rest) of a `---`-delimited YAML header; ({}, text) when there is none."""
    m = _FRONT.match(text)
    if not m:
        return {}, text
    try:
        meta = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError:
        return {}, text
    return (meta if isinstance(meta, dict) else {}), m.group(2)


def read_entry(path: Path) -> tuple[dict, str]:
    """Front matter and body of a KB note (.md) or kernel file (.py, from its module docstring)."""
    text = path.read_text(errors="replace")
    if path.suffix == ".py":
        try:
            doc = ast.get_docstring(parse_py(text), clean=False) or ""
        except SyntaxError:
            return {}, ""
        meta, rest = split_front_matter(doc)
        return meta, rest.strip()
    return split_front_matter(text)


def as_list(v) -> list[str]:
    """A front-matter field that may be one value or a list, as a list of strings."""
    if v is None or v == "":
        return []
    return [str(x) for x in (v if isinstance(v, (list, tuple)) else [v])]

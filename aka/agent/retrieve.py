"""Knowledge-base retrieval for prompts: the `Retriever` protocol and a file-based default.

`FileRetriever` reads the YAML front matter of `knowledge_base/**/*.md` notes and of the kernel
files' docstrings (knowledge_base/README.md) and ranks entries without embeddings:

    score = 10 (op listed) + 3 (category listed) + 1 per symptom word the roofline signal shows
            + 0.5 per technique not tried yet - 0.25 per technique already tried

Entries that match neither the op nor the category are left out, so a kernel-less op still gets
its category's notes. The Chroma retriever (aka/kb) plugs in through the same protocol.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml

from aka.problem import REPO_ROOT, Problem
from aka.util import parse_py

_FRONT = re.compile(r"\A\s*---[ \t]*\n(.*?)\n---[ \t]*\n?(.*)\Z", re.DOTALL)


@dataclass(frozen=True)
class Hit:
    id: str
    title: str
    text: str
    layer: str


class Retriever(Protocol):
    def retrieve(self, problem: Problem, signals: dict, tried: list[str], k: int) -> list[Hit]: ...


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


def _as_list(v) -> list[str]:
    if v is None:
        return []
    return [str(x) for x in (v if isinstance(v, list) else [v])]


def signal_words(signals: dict) -> set[str]:
    """Words a note's `symptoms` may share with what the measurements show."""
    words = set()
    for s in signals.get("shapes", []):
        if s.get("bound"):
            words.add(f"{s['bound']}-bound")
        if s.get("sol_fraction") is not None and s["sol_fraction"] < 0.3:
            words.add("launch" if s.get("small") else "bytes")
        if (s.get("ncu") or {}).get("spill_bytes"):
            words.add("spill")
    if signals.get("failure"):
        words.add("outlier" if "outlier" in signals["failure"] else "mismatch")
    return words


class FileRetriever:
    def __init__(self, root: str | Path | None = None, max_chars: int = 1800, exclude_op: bool = False):
        self.root = Path(root) if root else REPO_ROOT / "knowledge_base"
        self.max_chars = max_chars
        self.exclude_op = exclude_op  # leave-op-out: entries listing the problem's op are withheld
        self._entries: list[tuple[dict, str, Path]] | None = None

    def entries(self) -> list[tuple[dict, str, Path]]:
        if self._entries is None:
            found = []
            if self.root.is_dir():
                paths = sorted(self.root.rglob("*.md")) + sorted((self.root / "kernels").rglob("*.py"))
                for p in paths:
                    if p.name == "README.md" or any(part.startswith("_") for part in p.parts):
                        continue
                    meta, body = read_entry(p)
                    if meta:
                        found.append((meta, body, p))
            self._entries = found
        return self._entries

    def retrieve(self, problem: Problem, signals: dict, tried: list[str], k: int) -> list[Hit]:
        words, done = signal_words(signals), {t.lower() for t in tried}
        scored = []
        for meta, body, path in self.entries():
            ops = _as_list(meta.get("ops")) + _as_list(meta.get("op"))
            cats = _as_list(meta.get("categories")) + _as_list(meta.get("category"))
            if self.exclude_op and problem.name in ops:
                continue
            s = 10.0 * (problem.name in ops) + 3.0 * (problem.category in cats if problem.category else 0)
            if s == 0:
                continue
            sym = " ".join(_as_list(meta.get("symptoms"))).lower()
            s += sum(1.0 for w in words if w in sym)
            techs = [t.lower() for t in _as_list(meta.get("techniques"))]
            s += 0.5 * sum(t not in done for t in techs) - 0.25 * sum(t in done for t in techs)
            eid = str(meta.get("id") or path.relative_to(self.root).with_suffix(""))
            layer = str(meta.get("layer") or ("kernels" if path.suffix == ".py" else path.parent.name))
            title = str(meta.get("title") or meta.get("summary") or eid)
            text = body if path.suffix == ".md" else path.read_text(errors="replace")
            if len(text) > self.max_chars:
                text = text[: self.max_chars].rsplit("\n", 1)[0] + "\n[...]"
            scored.append((-s, eid, Hit(eid, title, text.strip(), layer)))
        scored.sort(key=lambda t: (t[0], t[1]))
        return [h for _, _, h in scored[:k]]

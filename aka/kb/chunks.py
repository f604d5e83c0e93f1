"""Knowledge-base files -> chunks: one per `##` section of a note, one per whole kernel file.

Every chunk carries its note's front matter (ops, categories, techniques, hardware, symptoms) and
title. Chroma metadata must be scalar, so list fields are stored twice: as a `,a,b,` string for
display and as one boolean flag per value (`op:rms_norm`, `cat:Normalization`, `tech:...`,
`hw:...`) that `where` filters can test with `$eq`/`$ne` (Chroma 1.5 has no substring test on
metadata; `$ne` also matches chunks that lack the key, which is what exclusion needs).
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from aka.kb.entries import as_list, read_entry, split_front_matter
from aka.util import parse_py

# Bumped whenever search_text() changes, so every chunk is re-embedded once.
TEXT_VERSION = 1
FLAG_PREFIX = {"ops": "op:", "categories": "cat:", "techniques": "tech:", "hardware": "hw:"}

_FENCE = re.compile(r"^\s*(```|~~~)")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def norm_technique(t: str) -> str:
    """`Online softmax`, `online_softmax` and `online-softmax` name one technique."""
    return re.sub(r"[\s_]+", "-", str(t).strip().lower())


@dataclass
class Chunk:
    id: str            # "ops/rms_norm#semantics", or the kernel id for a whole kernel file
    doc_id: str        # the note's or kernel's id
    title: str
    section: str       # "" for kernels
    layer: str
    path: str          # relative to the KB root
    text: str          # what a reader sees: "## Section\n..." or the whole kernel file
    fields: dict = field(default_factory=dict)  # ops, categories, techniques, hardware, symptoms, summary

    def metadata(self) -> dict:
        m = {"doc_id": self.doc_id, "title": self.title, "section": self.section, "layer": self.layer,
             "path": self.path, "summary": self.fields.get("summary", ""),
             "symptoms": " ; ".join(self.fields.get("symptoms", []))}
        for key, prefix in FLAG_PREFIX.items():
            vals = self.fields.get(key, [])
            m[key] = "," + ",".join(vals) + "," if vals else ""
            m.update({prefix + v: True for v in vals})
        m["hash"] = content_hash(self.text, m)
        return m


def content_hash(text: str, meta: dict) -> str:
    body = json.dumps([TEXT_VERSION, text, {k: v for k, v in sorted(meta.items()) if k != "hash"}])
    return hashlib.sha256(body.encode()).hexdigest()[:20]


def meta_list(meta: dict, key: str) -> list[str]:
    """A `,a,b,` metadata string back to its list."""
    return [v for v in str(meta.get(key) or "").split(",") if v]


def search_text(meta: dict, text: str) -> str:
    """What is embedded and what BM25 indexes: title, section, summary and symptoms first (MiniLM
    reads only 256 word pieces), then the body, then the op and technique tags. Built from the
    stored metadata and document alone so the lexical index needs nothing but Chroma's contents."""
    head = [meta.get("title", "")]
    if meta.get("section"):
        head.append(meta["section"])
    if meta.get("summary"):
        head.append(meta["summary"])
    if meta.get("symptoms"):
        head.append("Symptoms: " + meta["symptoms"])
    body = kernel_body(text) if meta.get("layer") == "kernels" else strip_heading(text)
    tags = meta_list(meta, "ops") + meta_list(meta, "techniques")
    return ". ".join(h for h in head if h) + "\n" + body + ("\n" + " ".join(tags) if tags else "")


def strip_heading(text: str) -> str:
    return re.sub(r"\A##[^\n]*\n", "", text)


def kernel_body(source: str) -> str:
    """A kernel file without its YAML front matter: docstring prose first, then the code."""
    try:
        tree = parse_py(source)
    except SyntaxError:
        return source
    doc = ast.get_docstring(tree, clean=False)
    if not doc or not tree.body:
        return source
    _, prose = split_front_matter(doc)
    code = "\n".join(source.splitlines()[tree.body[0].end_lineno:])
    return prose.strip() + "\n" + code.strip()


def _fields(meta: dict) -> dict:
    return {
        "ops": as_list(meta.get("ops")) + as_list(meta.get("op")),
        "categories": as_list(meta.get("categories")) + as_list(meta.get("category")),
        "techniques": [norm_technique(t) for t in as_list(meta.get("techniques"))],
        "hardware": as_list(meta.get("hardware")) or ["any"],
        "symptoms": as_list(meta.get("symptoms")),
        "summary": str(meta.get("summary") or ""),
    }


def split_sections(body: str) -> tuple[str, list[tuple[str, str]]]:
    """(`# Title` text or "", [(section heading, text including the heading line)]). Lines inside
    fenced code never start a section (a `## comment` in a Python sketch is not a heading)."""
    title, intro, sections = "", [], []
    cur: list[str] | None = None
    in_code = False
    for line in body.splitlines():
        if _FENCE.match(line):
            in_code = not in_code
        if not in_code and line.startswith("## "):
            cur = [line]
            sections.append(cur)
            continue
        if not in_code and cur is None and line.startswith("# ") and not title:
            title = line[2:].strip()
            continue
        (cur if cur is not None else intro).append(line)
    out = []
    if "\n".join(intro).strip():
        out.append(("Overview", "## Overview\n" + "\n".join(intro).strip()))
    out += [(s[0][3:].strip(), "\n".join(s).strip()) for s in sections]
    return title, out


def parse_note(path: Path, root: Path) -> list[Chunk]:
    meta, body = read_entry(path)
    if not meta:
        return []
    rel = path.relative_to(root)
    doc_id = str(meta.get("id") or rel.with_suffix(""))
    layer = str(meta.get("layer") or rel.parts[0])
    h1, sections = split_sections(body)
    title = str(meta.get("title") or h1 or doc_id)
    fields = _fields(meta)
    chunks, seen = [], {}
    for heading, text in sections:
        s = slug(heading)
        seen[s] = seen.get(s, 0) + 1
        cid = f"{doc_id}#{s}" + (f"-{seen[s]}" if seen[s] > 1 else "")
        chunks.append(Chunk(cid, doc_id, title, heading, layer, str(rel), text, fields))
    return chunks


def parse_kernel(path: Path, root: Path) -> list[Chunk]:
    meta, _ = read_entry(path)
    rel = path.relative_to(root)
    if not meta:
        return []
    doc_id = str(meta.get("id") or rel.with_suffix(""))
    fields = _fields(meta)
    if not fields["ops"]:
        fields["ops"] = [rel.parts[-2]]
    op = fields["ops"][0]
    title = f"{op} kernel {Path(doc_id).name}"
    return [Chunk(doc_id, doc_id, title, "", "kernels", str(rel), path.read_text(errors="replace"), fields)]


def kb_files(root: Path) -> list[Path]:
    """Notes (`<layer>/*.md`) and kernels (`kernels/<op>/*.py`); README and `_`-prefixed paths
    (scratch benches, sketch checks) are not part of the base."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if not p.is_file() or any(part.startswith(("_", ".")) for part in rel.parts) or len(rel.parts) < 2:
            continue
        if p.suffix == ".md" and p.name != "README.md" and rel.parts[0] != "kernels":
            out.append(p)
        elif p.suffix == ".py" and rel.parts[0] == "kernels" and len(rel.parts) == 3:
            out.append(p)
    return out


def load_chunks(root: Path) -> list[Chunk]:
    chunks: list[Chunk] = []
    for p in kb_files(root):
        chunks += parse_kernel(p, root) if p.suffix == ".py" else parse_note(p, root)
    ids = [c.id for c in chunks]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"duplicate knowledge-base ids: {', '.join(dup[:5])}")
    return chunks

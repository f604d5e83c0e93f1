"""Knowledge-base files -> chunks: one per `##` section of a note; several per kernel file (its
summary, its docstring's design paragraphs, its tunable parameters with the prose and comments
that mention them, and its code, one chunk per top-level function or class). A whole kernel file
as one chunk lost to short note sections (issue 20: the right kernel ranked 6th-73rd on held-out
queries); BM25 normalises by length and MiniLM reads only the first 256 word pieces.

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
TEXT_VERSION = 2
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
    tags = meta_list(meta, "ops") + meta_list(meta, "techniques")
    return ". ".join(h for h in head if h) + "\n" + strip_heading(text) + ("\n" + " ".join(tags) if tags else "")


def strip_heading(text: str) -> str:
    return re.sub(r"\A##[^\n]*\n", "", text)


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
    meta, prose = read_entry(path)
    rel = path.relative_to(root)
    if not meta:
        return []
    doc_id = str(meta.get("id") or rel.with_suffix(""))
    fields = _fields(meta)
    if not fields["ops"]:
        fields["ops"] = [rel.parts[-2]]
    op = fields["ops"][0]
    title = f"{op} kernel {Path(doc_id).name}"
    source = path.read_text(errors="replace")
    chunks, seen = [], {}
    for heading, body in kernel_sections(meta, prose, source):
        s = slug(heading)
        seen[s] = seen.get(s, 0) + 1
        cid = f"{doc_id}#{s}" + (f"-{seen[s]}" if seen[s] > 1 else "")
        chunks.append(Chunk(cid, doc_id, title, heading, "kernels", str(rel), f"## {heading}\n{body.strip()}", fields))
    return chunks


SECTION_CHARS = 900     # a design chunk about the size of a note section (median ~700 characters)
# A paragraph that opens with a short label ("Design:", "Few rows (decode): ...") starts a section.
_LABEL = re.compile(r"^([A-Z][\w,/()' -]{0,30}):(?:\s|$)")
_ITEM = re.compile(r"^\s*(?:[-*]|\d+[.)]) ")
_SENTENCE_END = re.compile(r"(?<!\be\.g\.)(?<!\bi\.e\.)(?<=[.;])\s+(?=[A-Z(`])")


def kernel_sections(meta: dict, prose: str, source: str) -> list[tuple[str, str]]:
    """(heading, text) per chunk of a kernel: Summary, Design (docstring paragraphs, a labelled
    paragraph starting its own section), Parameters, then Code per top-level function or class."""
    facts = [str(meta.get("summary") or "").strip()]
    for key in ("op", "category", "dtypes", "techniques"):
        if meta.get(key):
            facts.append(f"{key}: {', '.join(as_list(meta[key]))}")
    out = [("Summary", "\n".join(f for f in facts if f))]
    out += design_sections(prose)
    params = meta.get("params") if isinstance(meta.get("params"), dict) else {}
    code = _code_after_docstring(source)
    if params:
        out.append(("Parameters", param_notes(params, prose, code)))
    out += code_sections(code)
    return [(h, t) for h, t in out if t.strip()]


def _blocks(prose: str) -> list[str]:
    """Paragraphs and single bullets of the docstring prose (a bullet's continuation lines stay with it)."""
    out: list[str] = []
    cur: list[str] = []
    for line in prose.strip().splitlines():
        starts = not line.strip() or _ITEM.match(line)
        if starts and cur:
            out.append("\n".join(cur))
            cur = []
        if line.strip():
            cur.append(line.rstrip())
    if cur:
        out.append("\n".join(cur))
    return out


def _pieces(block: str) -> list[str]:
    """A paragraph longer than a section cut at sentence ends into pieces of at most about SECTION_CHARS."""
    if len(block) <= SECTION_CHARS:
        return [block]
    out = [""]
    for sent in _SENTENCE_END.split(" ".join(block.split())):
        if out[-1] and len(out[-1]) + len(sent) > SECTION_CHARS:
            out.append("")
        out[-1] = (out[-1] + " " + sent).strip()
    return out


def design_sections(prose: str) -> list[tuple[str, str]]:
    secs: list[tuple[str, list[str]]] = []
    for b in (p for blk in _blocks(prose) for p in _pieces(blk)):
        m = None if _ITEM.match(b) else _LABEL.match(b)
        size = sum(len(x) for x in secs[-1][1]) if secs else 0
        if m or not secs or size + len(b) > SECTION_CHARS:
            secs.append((m.group(1).strip() if m else "Design", []))
        secs[-1][1].append(b)
    return [(h, "\n".join(bs)) for h, bs in secs]


def param_notes(params: dict, prose: str, code: str) -> str:
    """The tunable parameters with their search ranges, then each docstring sentence and code
    comment that names one, tagged with the names: what a query about a parameter lands on."""
    lines = [f"- {name}: {values}" for name, values in params.items()]
    defaults = re.search(r"^AKA_PARAMS\s*=.*$", code, re.M)
    if defaults:
        lines.append("defaults: " + defaults.group(0))
    words = {n: re.compile(rf"\b{re.escape(str(n))}\b") for n in params}
    sentences = [" ".join(x.split()) for b in _blocks(prose) for x in _SENTENCE_END.split(_ITEM.sub("", b, count=1))]
    comments = [c.strip() for c in re.findall(r"#\s*(.+)$", code, re.M)]
    for text in dict.fromkeys(t for t in sentences + comments if t):
        named = [n for n, w in words.items() if w.search(text)]
        if named:
            lines.append(f"[{', '.join(named)}] {text}")
    return "\n".join(lines)


def code_bytes(source: bytes) -> bytes:
    """A kernel file's bytes after its module docstring (all of them when it has none or does not
    parse): the docstring's lines are dropped whole, the code's are kept byte for byte. The code
    chunks are cut from it, and a recorded verdict names its hash (aka.kb.verify.source_hash)."""
    try:
        tree = parse_py(source.decode("utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return source
    if tree.body and ast.get_docstring(tree, clean=False) is not None:
        return b"".join(source.splitlines(keepends=True)[tree.body[0].end_lineno:])
    return source


def _code_after_docstring(source: str) -> str:
    return code_bytes(source.encode()).decode()


def code_sections(code: str) -> list[tuple[str, str]]:
    """One chunk per top-level function or class (with its decorators and the comments above it);
    imports and module constants go with the first."""
    try:
        tree = parse_py(code)
    except SyntaxError:
        return [("Code", code)]
    lines = code.splitlines()
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    if not defs:
        return [("Code", code)]
    out, start = [], 0
    for i, n in enumerate(defs):
        first = min([n.lineno] + [d.lineno for d in n.decorator_list]) - 1
        while first > start and lines[first - 1].lstrip().startswith("#"):
            first -= 1
        if i == 0:
            first = 0
        end = defs[i + 1].lineno - 1 if i + 1 < len(defs) else len(lines)
        if i + 1 < len(defs):
            end = min([defs[i + 1].lineno] + [d.lineno for d in defs[i + 1].decorator_list]) - 1
            while end > first and lines[end - 1].lstrip().startswith("#"):
                end -= 1
        kind = "class" if isinstance(n, ast.ClassDef) else "function"
        out.append((f"Code: {kind} {n.name}", "\n".join(lines[first:end]).strip()))
        start = end
    return out


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

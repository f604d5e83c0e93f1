"""The retriever without embeddings: front matter of `knowledge_base/**/*.md` notes and of the
kernel files' docstrings (aka/kb/entries.py), ranked as

    score = 10 (op listed) + 3 (category listed) + 1 per symptom (aka/kb/retrieval.py) that the
            entry's `symptoms` field names + 0.5 per technique not tried yet - 0.25 per one tried

Entries that match neither the op nor the category are left out, so a kernel-less op still gets
its category's notes. It stands in for the Chroma retriever when the kb extras are not installed.
"""
from __future__ import annotations

from pathlib import Path

from aka.kb.entries import as_list, read_entry
from aka.kb.retrieval import Hit, Signals, clip
from aka.problem import REPO_ROOT, Problem


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

    def retrieve(self, problem: Problem, signals: Signals, tried: list[str], k: int) -> list[Hit]:
        shown, done = signals.symptoms(), {t.lower() for t in tried}
        scored = []
        for meta, body, path in self.entries():
            ops = as_list(meta.get("ops")) + as_list(meta.get("op"))
            cats = as_list(meta.get("categories")) + as_list(meta.get("category"))
            if self.exclude_op and problem.name in ops:
                continue
            s = 10.0 * (problem.name in ops) + 3.0 * (problem.category in cats if problem.category else 0)
            if s == 0:
                continue
            sym = " ".join(as_list(meta.get("symptoms"))).lower()
            s += sum(1.0 for y in shown if any(w in sym for w in y.words))
            techs = [t.lower() for t in as_list(meta.get("techniques"))]
            s += 0.5 * sum(t not in done for t in techs) - 0.25 * sum(t in done for t in techs)
            eid = str(meta.get("id") or path.relative_to(self.root).with_suffix(""))
            layer = str(meta.get("layer") or ("kernels" if path.suffix == ".py" else path.parent.name))
            title = str(meta.get("title") or meta.get("summary") or eid)
            text = body if path.suffix == ".md" else path.read_text(errors="replace")
            scored.append((-s, eid, Hit(eid, title, clip(text, self.max_chars), layer)))
        scored.sort(key=lambda t: (t[0], t[1]))
        return [h for _, _, h in scored[:k]]

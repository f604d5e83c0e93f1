"""Retrieval quality on the labelled queries (knowledge_base/queries.yaml): recall@k and MRR.

Per query, the ranking is at note/kernel level (a note ranks where its best chunk ranks):
  recall@k = |relevant ∩ top k| / |relevant|          (averaged over queries)
  MRR      = mean of 1 / rank of the first relevant id (0 when none is ranked at all)
Queries are run without filters: this measures the rankers, not the op boost of retrieve().
"""
from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from aka.problem import REPO_ROOT

DEFAULT_QUERIES = REPO_ROOT / "knowledge_base" / "queries.yaml"
DEFAULT_REPORT = REPO_ROOT / "knowledge_base" / "EVAL.md"


@dataclass
class Query:
    q: str
    relevant: list[str]
    kind: str = "problem"   # "problem" (what to write) or "symptom" (what a profile or failure shows)


@dataclass
class ModeResult:
    mode: str
    recall: float
    mrr: float
    per_query: list[dict] = field(default_factory=list)


def load_queries(path: str | Path | None = None) -> list[Query]:
    data = yaml.safe_load(Path(path or DEFAULT_QUERIES).read_text())
    rows = data.get("queries") if isinstance(data, dict) else data
    out = []
    for i, r in enumerate(rows or []):
        if not isinstance(r, dict) or not r.get("q") or not r.get("relevant"):
            raise ValueError(f"query {i}: needs `q` and a non-empty `relevant` list")
        out.append(Query(str(r["q"]), [str(x) for x in r["relevant"]], str(r.get("kind", "problem"))))
    return out


def recall_at(ranked: list[str], relevant: list[str], k: int) -> float:
    rel = set(relevant)
    return len(rel & set(ranked[:k])) / len(rel) if rel else 0.0


def reciprocal_rank(ranked: list[str], relevant: list[str]) -> float:
    rel = set(relevant)
    for i, d in enumerate(ranked, 1):
        if d in rel:
            return 1.0 / i
    return 0.0


def score(rankings: list[list[str]], queries: list[Query], k: int = 5) -> tuple[float, float]:
    """(mean recall@k, MRR) of one ranking per query."""
    if not queries:
        return 0.0, 0.0
    r = [recall_at(rk, q.relevant, k) for rk, q in zip(rankings, queries)]
    m = [reciprocal_rank(rk, q.relevant) for rk, q in zip(rankings, queries)]
    return sum(r) / len(r), sum(m) / len(m)


def check_labels(queries: list[Query], known: set[str]) -> list[str]:
    return sorted({d for q in queries for d in q.relevant if d not in known})


def run(index, queries: list[Query], modes=("embedding", "lexical", "hybrid"), k: int = 5) -> list[ModeResult]:
    from aka.kb.index import doc_ranking
    known = {m.get("doc_id") for m in index.corpus()[1]}
    unknown = check_labels(queries, known)
    if unknown:
        raise ValueError(f"queries name ids that are not in the index: {', '.join(unknown)}")
    out = []
    for mode in modes:
        ranks = [doc_ranking(index.search(q.q, mode=mode)) for q in queries]
        rec, mrr = score(ranks, queries, k)
        per = [{"q": q.q, "relevant": q.relevant, "top": rk[:k], "recall": recall_at(rk, q.relevant, k),
                "rr": reciprocal_rank(rk, q.relevant)} for q, rk in zip(queries, ranks)]
        out.append(ModeResult(mode, rec, mrr, per))
    return out


def kb_counts(index) -> dict:
    ids, metas, _, _ = index.corpus()
    docs = {m.get("doc_id"): m.get("layer") for m in metas}
    return {"chunks": len(ids), "documents": len(docs), "by_layer": dict(sorted(Counter(docs.values()).items()))}


def paired(a: ModeResult, b: ModeResult, key: str, sign: int) -> int:
    """Queries where ranker a does better (sign 1) or worse (sign -1) than b on one metric."""
    return sum((x[key] - y[key]) * sign > 1e-12 for x, y in zip(a.per_query, b.per_query))


def write_report(path: str | Path, results: list[ModeResult], queries: list[Query], counts: dict, model: str,
                 k: int = 5, default_mode: str = "") -> Path:
    best = max(results, key=lambda r: (r.recall, r.mrr))
    layers = Counter(d.split("/")[0] for q in queries for d in q.relevant)
    kinds = Counter(q.kind for q in queries)
    lines = [
        "# Knowledge-base retrieval: evaluation",
        "",
        f"Written by `aka kb eval --out knowledge_base/EVAL.md` on {dt.date.today().isoformat()}; do not edit by hand.",
        "",
        f"- Model: {model}, cosine similarity, Chroma PersistentClient.",
        f"- Base: {counts['documents']} documents ({', '.join(f'{l} {n}' for l, n in counts['by_layer'].items())}), "
        f"{counts['chunks']} chunks.",
        f"- Queries: {len(queries)} ({', '.join(f'{n} {kd}' for kd, n in sorted(kinds.items()))}) from "
        f"knowledge_base/queries.yaml; relevant ids by layer: "
        f"{', '.join(f'{l} {n}' for l, n in sorted(layers.items()))}.",
        "- Ranking at note/kernel level (a note ranks where its best chunk ranks), no filters.",
    ]
    lines += ["", f"| ranker | recall@{k} | MRR |", "|---|---|---|"]
    lines += [f"| {r.mode} | {r.recall:.3f} | {r.mrr:.3f} |" for r in results]
    note = f"; the default ranker is `{default_mode}`." if default_mode else "."
    lines += ["", f"Best on this set: **{best.mode}**{note}", ""]
    for r in results:
        if r is not best:
            lines.append(f"- {best.mode} vs {r.mode}, per query: reciprocal rank better on "
                         f"{paired(best, r, 'rr', 1)}, worse on {paired(best, r, 'rr', -1)}; recall@{k} better on "
                         f"{paired(best, r, 'recall', 1)}, worse on {paired(best, r, 'recall', -1)} "
                         f"(ties elsewhere, of {len(queries)}).")
    lines += ["", f"## Queries the {best.mode} ranker does not fully answer (recall@{k} < 1)", ""]
    misses = [p for p in best.per_query if p["recall"] < 1.0]
    for p in misses:
        missing = [d for d in p["relevant"] if d not in p["top"]]
        lines.append(f"- \"{p['q']}\": missing {', '.join(missing)}; top {k}: {', '.join(p['top'])}")
    if not misses:
        lines.append("- none")
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)

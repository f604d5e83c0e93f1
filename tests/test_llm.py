"""aka.llm against a local fake of both wire formats, driven by the real SDKs."""

from __future__ import annotations

import email.utils
import json
import time

import pytest

from aka.llm import (
    LLM,
    AnthropicLLM,
    Budget,
    BudgetedLLM,
    BudgetExceeded,
    CachedLLM,
    Completion,
    ContextTooLongError,
    FatalLLMError,
    LLMError,
    Message,
    OpenAILLM,
    RetryConfig,
    RetryingLLM,
    ScriptedLLM,
    TransientLLMError,
    build_llm,
    cache_key,
    cost_usd,
    make_llm,
    parse_spec,
    price_for,
)
from aka.llm.providers import parse_retry_after

try:  # tests/ is a plain directory today; keep working if it becomes a package
    from tests.fakes.llm_server import FakeLLMServer, count_words
except ImportError:
    from fakes.llm_server import FakeLLMServer, count_words

KEY = "sk-test-0123456789abcdef"
PRICES = {"claude-opus-5": (3.0, 17.0), "gpt-5.4": (1.5, 11.0)}  # odd on purpose
MODEL = {"anthropic": "claude-opus-5", "openai": "gpt-5.4"}
KINDS = ("anthropic", "openai")
SYSTEM = "You write Triton kernels for the H200."
CONVO = [
    Message("user", "Write a fused softmax kernel for rows of 4096 floats."),
    Message("assistant", "Here is a first draft with BLOCK_SIZE 1024."),
    Message("user", "It is slow; use one program per row and mask the tail."),
]


class SleepRecorder:
    def __init__(self):
        self.calls: list[float] = []

    def __call__(self, s: float) -> None:
        self.calls.append(s)


@pytest.fixture
def server():
    with FakeLLMServer(api_key=KEY) as s:
        yield s


def provider(kind: str, server: FakeLLMServer, *, timeout_s: float = 2.0, api_key: str = KEY):
    if kind == "anthropic":
        return AnthropicLLM(MODEL[kind], api_key=api_key, base_url=server.anthropic_base_url, timeout_s=timeout_s, prices=PRICES)
    return OpenAILLM(
        MODEL[kind], api_key=api_key, base_url=server.openai_base_url, timeout_s=timeout_s, prices=PRICES, compat=False
    )


def retrying(inner, attempts: int = 4, sleep=None) -> RetryingLLM:
    return RetryingLLM(inner, attempts, base_delay_s=0.001, max_delay_s=0.01, sleep=sleep or SleepRecorder())


def expected_input_tokens(system: str | None, messages: list[Message]) -> int:
    return count_words(system) + sum(count_words(m.content) for m in messages)


# -- plain calls ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_plain_reply_reports_text_tokens_and_cost(server, kind):
    reply = "@triton.jit\ndef softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr): ..."
    server.add({"text": reply})
    c = provider(kind, server).complete(CONVO, system=SYSTEM, max_tokens=777, temperature=0.25)

    tin, tout = expected_input_tokens(SYSTEM, CONVO), count_words(reply)
    pin, pout = PRICES[MODEL[kind]]
    assert c.text == reply
    assert (c.input_tokens, c.output_tokens) == (tin, tout)
    assert c.cost_usd == pytest.approx((tin * pin + tout * pout) / 1e6)
    assert (c.provider, c.model, c.cached, c.stop_reason) == (kind, MODEL[kind], False, "stop")
    assert c.raw_id and c.latency_s > 0

    (req,) = server.requests
    assert req.key_ok and KEY not in json.dumps(req.headers)
    if kind == "anthropic":
        assert req.path == "/v1/messages"
        assert req.body["system"] == SYSTEM and req.body["max_tokens"] == 777
        assert [m["role"] for m in req.body["messages"]] == ["user", "assistant", "user"]
        assert "temperature" not in req.body  # API version 2026-10-21 rejects it
    else:
        assert req.path == "/v1/chat/completions"
        assert req.body["messages"][0] == {"role": "system", "content": SYSTEM}
        assert req.body["max_completion_tokens"] == 777
        assert "temperature" not in req.body  # gpt-5* accepts only the default


def test_openai_non_reasoning_model_gets_temperature(server):
    server.add({"text": "ok"})
    llm = OpenAILLM("gpt-4.1", api_key=KEY, base_url=server.openai_base_url, timeout_s=2, compat=False)
    llm.complete(CONVO[:1], temperature=0.35)
    assert server.requests[0].body["temperature"] == 0.35


# -- retries ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_rate_limit_then_success_is_retried_honouring_retry_after(server, kind):
    server.add({"status": 429, "headers": {"retry-after": "0"}}, {"text": "second try"})
    sleeps = SleepRecorder()
    c = retrying(provider(kind, server), sleep=sleeps).complete(CONVO)
    assert c.text == "second try"
    assert len(server.requests) == 2
    assert sleeps.calls == [0.0]  # the server's retry-after, not the jittered backoff


@pytest.mark.parametrize("kind", KINDS)
def test_overloaded_and_server_errors_are_retried(server, kind):
    server.add({"status": 529}, {"status": 500}, {"status": 503}, {"text": "fine now"})
    c = retrying(provider(kind, server), attempts=5).complete(CONVO)
    assert c.text == "fine now"
    assert len(server.requests) == 4


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_is_retried_then_succeeds(server, kind):
    server.add({"delay_s": 3, "text": "too late"}, {"text": "in time"})
    t0 = time.monotonic()
    c = retrying(provider(kind, server, timeout_s=0.3)).complete(CONVO)
    assert c.text == "in time"
    assert len(server.requests) == 2
    assert time.monotonic() - t0 < 2.5  # did not wait for the slow reply


@pytest.mark.parametrize("kind", KINDS)
def test_retries_exhausted_raises_transient(server, kind):
    server.add(*[{"status": 500, "message": "boom"}] * 3)
    with pytest.raises(TransientLLMError, match="gave up after 3 attempt") as ei:
        retrying(provider(kind, server), attempts=3).complete(CONVO)
    assert ei.value.status == 500 and MODEL[kind] in str(ei.value)
    assert len(server.requests) == 3


def test_connection_refused_is_transient_and_says_unreachable_where():
    from aka.llm import RetryingLLM, UnreachableLLMError
    with FakeLLMServer() as s:
        base = s.anthropic_base_url
    llm = AnthropicLLM("claude-opus-5", api_key=KEY, base_url=base, timeout_s=1.0)
    with pytest.raises(UnreachableLLMError, match=f"cannot connect to {base}/v1/messages: .*Connection refused"):
        llm.complete(CONVO)
    assert issubclass(UnreachableLLMError, TransientLLMError)  # retried like any transient failure
    with pytest.raises(UnreachableLLMError, match="gave up after 2 attempt"):  # and still itself once they run out
        RetryingLLM(llm, 2, 0.0, 0.0, sleep=lambda s: None).complete(CONVO)


def test_retry_after_is_capped_at_max_delay(server):
    server.add({"status": 429, "headers": {"retry-after": "120"}}, {"text": "ok"})
    sleeps = SleepRecorder()
    llm = RetryingLLM(provider("anthropic", server), 3, base_delay_s=0.001, max_delay_s=0.07, sleep=sleeps)
    assert llm.complete(CONVO).text == "ok"
    assert sleeps.calls == [0.07]


def test_parse_retry_after_forms():
    assert parse_retry_after({"retry-after-ms": "1250", "retry-after": "9"}) == pytest.approx(1.25)
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    later = email.utils.formatdate(time.time() + 40, usegmt=True)
    assert 35 < parse_retry_after({"retry-after": later}) <= 40
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_backoff_is_full_jitter_under_the_exponential_ceiling():
    script: list = [TransientLLMError("busy") for _ in range(6)] + ["done"]
    sleeps = SleepRecorder()
    llm = RetryingLLM(ScriptedLLM(script), 7, base_delay_s=0.5, max_delay_s=3.0, sleep=sleeps, seed=11)
    assert llm.complete(CONVO).text == "done"
    ceilings = [min(3.0, 0.5 * 2**i) for i in range(6)]
    assert len(sleeps.calls) == 6
    assert all(0.0 <= s <= cap for s, cap in zip(sleeps.calls, ceilings))
    assert len(set(sleeps.calls)) == 6  # jittered, not a fixed schedule
    assert llm.attempts_total == 7


def test_fatal_error_is_not_retried_by_wrapper():
    inner = ScriptedLLM([FatalLLMError("bad request"), "never reached"])
    with pytest.raises(FatalLLMError):
        retrying(inner).complete(CONVO)
    assert inner.remaining == 1


# -- fatal errors -----------------------------------------------------------------------


FATAL_CASES = [
    ({"status": 401}, FatalLLMError, "authentication failed"),
    ({"status": 404, "message": "model: claude-nope"}, FatalLLMError, "not found"),
    ({"status": 400, "message": "prompt is too long: 212000 tokens > 200000 maximum"}, ContextTooLongError, "context too long"),
    ({"status": 422, "message": "messages: roles must alternate"}, FatalLLMError, "bad request"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("step,exc_type,cause", FATAL_CASES)
def test_fatal_statuses_fail_fast_with_clear_message(server, kind, step, exc_type, cause):
    server.add(step, {"text": "must not be reached"})
    with pytest.raises(exc_type) as ei:
        retrying(provider(kind, server)).complete(CONVO)
    msg = str(ei.value)
    assert "\n" not in msg and kind in msg and MODEL[kind] in msg and cause in msg
    assert ei.value.status == step["status"]
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_key_names_the_env_var_and_never_the_key(server, kind):
    bad = "sk-wrong-key-987654321"
    llm = provider(kind, server, api_key=bad)
    with pytest.raises(FatalLLMError) as ei:
        retrying(llm).complete(CONVO)
    env = "ANTHROPIC_API_KEY" if kind == "anthropic" else "OPENAI_API_KEY"
    assert env in str(ei.value)
    assert bad not in str(ei.value) and bad not in repr(llm)
    assert [r.key_ok for r in server.requests] == [False]


# -- cache ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_cache_hit_refresh_and_sample_index(server, kind, tmp_path):
    server.add({"text": "first answer"}, {"text": "sample two"}, {"text": "refreshed answer"})
    inner = provider(kind, server)
    cached = CachedLLM(retrying(inner), tmp_path)

    a = cached.complete(CONVO, system=SYSTEM)
    b = cached.complete(CONVO, system=SYSTEM)
    assert len(server.requests) == 1
    assert (b.text, b.cached, b.latency_s, b.cost_usd) == ("first answer", True, 0.0, 0.0)
    assert (b.input_tokens, b.output_tokens) == (a.input_tokens, a.output_tokens) and a.cost_usd > 0

    c = cached.complete(CONVO, system=SYSTEM, sample_index=1)
    assert c.text == "sample two" and not c.cached and len(server.requests) == 2

    r = CachedLLM(inner, tmp_path, mode="refresh").complete(CONVO, system=SYSTEM)
    assert r.text == "refreshed answer" and len(server.requests) == 3
    assert cached.complete(CONVO, system=SYSTEM).text == "refreshed answer"  # overwritten
    assert len(server.requests) == 3

    files = sorted(tmp_path.rglob("*"))
    assert not [f for f in files if f.name.endswith(".tmp")]
    entries = [f for f in files if f.suffix == ".json"]
    assert len(entries) == 2
    assert all(KEY not in f.read_text() for f in entries)


def test_cache_off_always_calls_through(tmp_path):
    inner = ScriptedLLM(["one", "two"])
    llm = CachedLLM(inner, tmp_path, mode="off")
    assert [llm.complete(CONVO).text for _ in range(2)] == ["one", "two"]
    assert not list(tmp_path.iterdir())


def test_cache_key_covers_every_field():
    base = dict(
        provider="anthropic", model="claude-opus-5", base_url="https://api.anthropic.com", system=SYSTEM,
        messages=CONVO, max_tokens=4096, temperature=0.7, sample_index=0,
    )
    variants = {
        "provider": "openai", "model": "claude-sonnet-4-5", "base_url": "http://127.0.0.1:8000/v1",
        "system": SYSTEM + " ", "messages": CONVO[:2], "max_tokens": 4097, "temperature": 0.71, "sample_index": 3,
    }
    k0, _ = cache_key(**base)
    assert cache_key(**dict(reversed(list(base.items()))))[0] == k0
    keys = {k0}
    for field, value in variants.items():
        keys.add(cache_key(**{**base, field: value})[0])
    assert len(keys) == 1 + len(variants)


def test_cache_write_failure_leaves_no_file_and_corrupt_entry_is_a_miss(tmp_path, monkeypatch):
    inner = ScriptedLLM(["lost", "second", "third"])
    llm = CachedLLM(inner, tmp_path)

    def crash(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("aka.llm.cache.json.dump", crash)
    with pytest.raises(OSError):
        llm.complete(CONVO)
    monkeypatch.undo()
    assert not [f for f in tmp_path.rglob("*") if f.is_file()]

    assert llm.complete(CONVO).text == "second"
    (entry,) = [f for f in tmp_path.rglob("*.json")]
    entry.write_text(entry.read_text()[:40])  # a torn file, as a non-atomic writer could leave
    assert llm.complete(CONVO).text == "third"
    assert json.loads(entry.read_text())["completion"]["text"] == "third"


# -- budgets and accounting -------------------------------------------------------------


def test_budget_stops_after_max_calls_through_build_llm(server):
    server.add(*[{"text": f"reply {i}"} for i in range(5)])
    budget = Budget(max_calls=2)
    llm = build_llm(
        "anthropic:claude-opus-5", api_key=KEY, base_url=server.anthropic_base_url, timeout_s=2,
        retry=RetryConfig(max_attempts=2, base_delay_s=0.001, max_delay_s=0.01), budget=budget,
    )
    llm.complete(CONVO)
    llm.complete(CONVO)
    with pytest.raises(BudgetExceeded, match="max_calls") as ei:
        llm.complete(CONVO)
    assert (ei.value.limit, ei.value.used) == ("max_calls", 2)
    assert len(server.requests) == 2 and budget.usage.calls == 2
    assert isinstance(llm, BudgetedLLM) and isinstance(llm.inner, RetryingLLM) and isinstance(llm, LLM)


def test_budget_stops_on_cost_and_counts_cache_hits_as_free_calls(server, tmp_path):
    server.add(*[{"text": "a b c d e f g"}] * 4)
    one_call = cost_usd("claude-opus-5", expected_input_tokens(None, CONVO), 7, PRICES)
    budget = Budget(max_cost_usd=1.5 * one_call)
    llm = build_llm(
        "anthropic:claude-opus-5", api_key=KEY, base_url=server.anthropic_base_url, timeout_s=2,
        cache_dir=tmp_path, budget=budget, prices=PRICES,
    )
    llm.complete(CONVO)
    llm.complete(CONVO)  # cache hit: free
    llm.complete(CONVO, sample_index=1)  # real call, now over 1.5x
    with pytest.raises(BudgetExceeded, match="max_cost_usd"):
        llm.complete(CONVO, sample_index=2)
    u = budget.usage
    assert (u.calls, u.cached_calls, len(server.requests)) == (3, 1, 2)
    assert u.cost_usd == pytest.approx(2 * one_call)
    assert u.input_tokens == 3 * expected_input_tokens(None, CONVO)


def test_budget_token_limits_wall_clock_and_per_model_breakdown():
    budget = Budget(max_output_tokens=9)
    a = BudgetedLLM(ScriptedLLM(["one two three four five", "six seven"], model="claude-sonnet-4-5"), budget)
    b = BudgetedLLM(ScriptedLLM(["x y z w", "never"], model="local-qwen"), budget)
    a.complete(CONVO)
    b.complete(CONVO)
    with pytest.raises(BudgetExceeded, match="max_output_tokens"):
        a.complete(CONVO)
    per = budget.usage.by_model
    assert per["scripted:claude-sonnet-4-5"].output_tokens == 5 and per["scripted:local-qwen"].output_tokens == 4
    assert per["scripted:claude-sonnet-4-5"].cost_usd > 0 and per["scripted:local-qwen"].cost_usd == 0
    assert budget.usage.cost_usd == pytest.approx(sum(m.cost_usd for m in per.values()))

    with pytest.raises(BudgetExceeded, match="max_input_tokens"):
        BudgetedLLM(ScriptedLLM(["r"]), Budget(max_input_tokens=0)).complete(CONVO)
    late = Budget(max_wall_s=0.05)
    time.sleep(0.06)
    with pytest.raises(BudgetExceeded, match="max_wall_s"):
        late.check()
    late.start()
    late.check()


def test_price_lookup_by_prefix():
    assert price_for("claude-opus-4-5-20251101") == price_for("claude-opus-4-5")
    assert price_for("gpt-5.4-mini-2026-03-17") == price_for("gpt-5.4-mini") != price_for("gpt-5.4")
    assert price_for("gpt-5.45") == (0.0, 0.0)  # no boundary, no match
    assert price_for("Qwen/Qwen3-32B") == (0.0, 0.0)
    assert price_for("qwen3-32b", {"qwen3": (0.2, 0.6)}) == (0.2, 0.6)
    assert cost_usd("qwen3-32b", 2_000_000, 500_000, {"qwen3": (0.2, 0.6)}) == pytest.approx(0.7)


# -- construction from specs -----------------------------------------------------------


def test_parse_spec_forms_and_errors():
    assert parse_spec("anthropic:claude-opus-5") == ("anthropic", "claude-opus-5", None)
    assert parse_spec("openai:gpt-5.4-mini") == ("openai", "gpt-5.4-mini", None)
    assert parse_spec("openai-compat:org/model@v2@http://10.0.0.5:8000/v1") == (
        "openai-compat", "org/model@v2", "http://10.0.0.5:8000/v1",
    )
    for bad in ("gemini:pro", "claude-opus-5", "anthropic:", "openai-compat:qwen3"):
        with pytest.raises(FatalLLMError, match="spec"):
            parse_spec(bad)


def test_make_llm_missing_key_names_env_var(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(FatalLLMError, match="ANTHROPIC_API_KEY"):
        make_llm("anthropic:claude-opus-5")
    with pytest.raises(FatalLLMError, match="OPENAI_API_KEY"):
        make_llm("openai:gpt-5.4")
    with pytest.raises(FatalLLMError, match="unknown LLM spec"):
        make_llm("mistral:large")


def test_make_llm_openai_with_proxy_url_still_needs_the_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(FatalLLMError, match="OPENAI_API_KEY"):
        make_llm("openai:gpt-5.4", base_url="http://127.0.0.1:9/v1")


def test_make_llm_reads_key_from_env(server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    server.add({"text": "from env"})
    llm = make_llm("anthropic:claude-haiku-4-5", base_url=server.anthropic_base_url, timeout_s=2)
    assert llm.name == "anthropic:claude-haiku-4-5" and KEY not in repr(llm)
    assert llm.complete(CONVO).text == "from env"
    assert server.requests[0].key_ok


def test_openai_compat_path_without_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeLLMServer([{"text": "local model says hi"}], api_key=None) as s:
        llm = build_llm(
            f"openai-compat:Qwen/Qwen3-8B@{s.openai_base_url}", timeout_s=2,
            retry=RetryConfig(max_attempts=2, base_delay_s=0.001, max_delay_s=0.01),
        )
        c = llm.complete(CONVO, system=SYSTEM, max_tokens=321, temperature=0.3)
        (req,) = s.requests
    assert c.text == "local model says hi" and c.provider == "openai-compat" and c.cost_usd == 0
    assert isinstance(llm, RetryingLLM) and isinstance(llm, LLM) and isinstance(llm.inner, OpenAILLM)
    assert llm.name == f"openai-compat:Qwen/Qwen3-8B@{s.openai_base_url}" and llm.base_url == s.openai_base_url
    assert req.path == "/v1/chat/completions"
    assert (req.body["model"], req.body["max_tokens"], req.body["temperature"]) == ("Qwen/Qwen3-8B", 321, 0.3)


def test_openai_compat_uses_env_key_when_set(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with FakeLLMServer([{"text": "ok"}], api_key=KEY) as s:
        assert make_llm(f"openai-compat:llama3@{s.openai_base_url}", timeout_s=2).complete(CONVO).text == "ok"
        assert s.requests[0].key_ok


# -- ScriptedLLM ------------------------------------------------------------------------


def test_scripted_llm_replays_raises_and_records():
    boom = TransientLLMError("rate limited")
    llm = ScriptedLLM(["alpha beta", boom, "gamma"])
    assert llm.complete(CONVO, system="sys prompt", max_tokens=99).text == "alpha beta"
    with pytest.raises(TransientLLMError):
        llm.complete(CONVO[:1])
    c = llm.complete(CONVO[:1], sample_index=4)
    assert isinstance(c, Completion) and c.text == "gamma" and c.input_tokens == count_words(CONVO[0].content)
    with pytest.raises(LLMError, match="exhausted"):
        llm.complete(CONVO)
    assert llm.prompts[0]["max_tokens"] == 99
    assert [p["system"] for p in llm.prompts] == ["sys prompt", None, None, None]
    assert [p["sample_index"] for p in llm.prompts] == [0, 0, 4, 0]


def test_message_rejects_unknown_role():
    with pytest.raises(ValueError, match="role"):
        Message("system", "system prompts go in system=")

"""Build an LLM from a spec string, and the standard wrapper stack around it."""

from __future__ import annotations

import os

from .base import FatalLLMError
from .budget import Budget, BudgetedLLM
from .cache import CachedLLM
from .providers import AnthropicLLM, OpenAILLM
from .retry import RetryConfig, RetryingLLM

SPEC_FORMS = ("anthropic:<model>", "openai:<model>", "openai-compat:<model>@<base_url>")


def parse_spec(spec: str) -> tuple[str, str, str | None]:
    """'anthropic:claude-opus-4-5' -> ('anthropic', 'claude-opus-4-5', None);
    'openai-compat:qwen3@http://localhost:8000/v1' -> ('openai-compat', 'qwen3', 'http://...')."""
    prefix, sep, rest = spec.partition(":")
    forms = ", ".join(SPEC_FORMS)
    if not sep or prefix not in ("anthropic", "openai", "openai-compat"):
        raise FatalLLMError(f"unknown LLM spec {spec!r}: expected one of {forms}")
    base_url = None
    if prefix == "openai-compat":
        # Split at the last "@http" so model names containing "@" survive.
        at = rest.rfind("@http")
        if at < 0:
            raise FatalLLMError(f"LLM spec {spec!r} needs a server URL: openai-compat:<model>@<base_url>")
        rest, base_url = rest[:at], rest[at + 1 :]
    if not rest:
        raise FatalLLMError(f"LLM spec {spec!r} names no model: expected one of {forms}")
    return prefix, rest, base_url


def make_llm(spec: str, **overrides) -> AnthropicLLM | OpenAILLM:
    """A bare provider (no retries, cache or budget). `overrides` go to the provider's
    constructor: api_key, base_url, timeout_s, prices. A missing key raises
    FatalLLMError naming the environment variable to set."""
    prefix, model, base_url = parse_spec(spec)
    if prefix == "anthropic":
        return AnthropicLLM(model, **overrides)
    if prefix == "openai":
        # A base_url override here is a proxy in front of OpenAI: still needs the real key.
        return OpenAILLM(model, compat=False, **overrides)
    overrides.setdefault("base_url", base_url)
    return OpenAILLM(model, compat=True, **overrides)


def build_llm(
    spec: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    cache_mode: str = "use",
    retry: RetryConfig = RetryConfig(),
    budget: Budget | None = None,
    **overrides,
):
    """Budgeted(Cached(Retrying(provider))): a cache hit never reaches the network and
    never retries; the budget sees every completion handed to the caller (see budget.py)."""
    llm = RetryingLLM.from_config(make_llm(spec, **overrides), retry)
    if cache_dir is not None:
        llm = CachedLLM(llm, cache_dir, mode=cache_mode)
    if budget is not None:
        llm = BudgetedLLM(llm, budget)
    return llm

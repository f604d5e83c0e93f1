"""LLM provider layer: one interface over Anthropic, OpenAI and OpenAI-compatible servers,
with retries, a response cache, usage accounting and budgets.

    llm = build_llm("anthropic:claude-opus-5", cache_dir=".aka/llm-cache", budget=Budget(max_cost_usd=5))
    c = llm.complete([Message("user", "Write a Triton softmax kernel.")], system="...", sample_index=0)
"""

from .base import (
    LLM,
    BudgetExceeded,
    Completion,
    ContextTooLongError,
    FatalLLMError,
    LLMError,
    Message,
    TransientLLMError,
    UnreachableLLMError,
)
from .budget import Budget, BudgetedLLM, ModelUsage, Usage
from .cache import CachedLLM, cache_key
from .pricing import DEFAULT_PRICES, cost_usd, price_for, register_price
from .providers import AnthropicLLM, OpenAILLM
from .scripted import ScriptedLLM

# Retries need tenacity, an optional extra: import it only when a caller asks for it, so the
# offline agent runs where only torch and triton are installed (the GPU machines' image).
_LAZY = {"RetryConfig": "retry", "RetryingLLM": "retry", "build_llm": "factory", "make_llm": "factory",
         "parse_spec": "factory"}


def check_installed(spec: str) -> None:
    """Before a run starts: MissingExtra (one line naming the `llm` extra) when the SDK or the retry
    library a spec needs is not installed, rather than a traceback from deep inside the first round."""
    from aka.errors import require
    sdk = {"anthropic": "anthropic", "openai": "openai", "openai-compat": "openai"}.get(spec.split(":", 1)[0])
    if sdk is None:
        return  # an unknown spec is parse_spec's to report
    require(sdk, f"model={spec}")
    require("tenacity", f"model={spec} (its retries)")


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)

__all__ = [
    "LLM",
    "AnthropicLLM",
    "Budget",
    "BudgetExceeded",
    "BudgetedLLM",
    "CachedLLM",
    "Completion",
    "ContextTooLongError",
    "DEFAULT_PRICES",
    "FatalLLMError",
    "LLMError",
    "Message",
    "ModelUsage",
    "OpenAILLM",
    "RetryConfig",
    "RetryingLLM",
    "ScriptedLLM",
    "TransientLLMError",
    "UnreachableLLMError",
    "Usage",
    "build_llm",
    "cache_key",
    "cost_usd",
    "make_llm",
    "parse_spec",
    "price_for",
    "register_price",
]

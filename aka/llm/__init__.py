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
)
from .budget import Budget, BudgetedLLM, ModelUsage, Usage
from .cache import CachedLLM, cache_key
from .factory import build_llm, make_llm, parse_spec
from .pricing import DEFAULT_PRICES, cost_usd, price_for, register_price
from .providers import AnthropicLLM, OpenAILLM
from .retry import RetryConfig, RetryingLLM
from .scripted import ScriptedLLM

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
    "Usage",
    "build_llm",
    "cache_key",
    "cost_usd",
    "make_llm",
    "parse_spec",
    "price_for",
    "register_price",
]

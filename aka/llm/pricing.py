"""USD per million tokens (input, output), looked up by model-name prefix.

Standard-tier, short-context list prices. Sources, read 2026:
- Anthropic: platform.claude.com/docs/about-claude/models (model pages and the
  "how it compares" table) and the per-model table in github/docs
  data/tables/copilot/models-and-pricing.yml.
- OpenAI: developers.openai.com/api/docs/pricing as quoted in the same github/docs table
  (GPT-5.4 and 5.5 have a higher rate above 272K input tokens; not modelled here).
Prices change: pass `prices=` (or call register_price) rather than trusting this table
for billing. Unknown and local models cost 0.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

log = logging.getLogger("aka.llm")

Price = tuple[float, float]  # (USD per 1M input tokens, USD per 1M output tokens)

DEFAULT_PRICES: dict[str, Price] = {
    # Anthropic
    "claude-fable-5": (10.0, 50.0),
    "claude-opus-5-5": (4.0, 20.0),
    "claude-opus-5": (5.0, 25.0),
    "claude-sonnet-5-5": (2.0, 10.0),
    "claude-sonnet-5": (2.0, 10.0),
    "claude-opus-4-8": (5.0, 25.0),
    "claude-opus-4-7": (5.0, 25.0),
    "claude-opus-4-6": (5.0, 25.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),  # 4, 4.5 and 4.6 share the rate
    "claude-haiku-4-5": (1.0, 5.0),
    # OpenAI
    "gpt-5.6-sol": (5.0, 30.0),
    "gpt-5.6-terra": (2.0, 12.0),
    "gpt-5.6-luna": (0.20, 1.20),
    "gpt-5.5": (5.0, 30.0),
    "gpt-5.4": (2.50, 15.0),
    "gpt-5.4-mini": (0.75, 4.50),
    "gpt-5.4-nano": (0.20, 1.25),
    "gpt-5.3-codex": (1.75, 14.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-4.1": (2.0, 8.0),
}

_lock = threading.Lock()
_registered: dict[str, Price] = {}
_warned: set[str] = set()


def register_price(prefix: str, input_per_mtok: float, output_per_mtok: float) -> None:
    """Add or replace a process-wide price (wins over DEFAULT_PRICES)."""
    if input_per_mtok < 0 or output_per_mtok < 0:
        raise ValueError("prices must be >= 0")
    with _lock:
        _registered[prefix] = (float(input_per_mtok), float(output_per_mtok))


def _matches(model: str, prefix: str) -> bool:
    # A prefix must end at a name boundary, so "gpt-5.4" does not price "gpt-5.45" and
    # dated snapshots ("claude-opus-4-5-20251101", "gpt-5.4-mini-2026-03-17") still match.
    return model == prefix or (model.startswith(prefix) and model[len(prefix)] in "-:@/")


def price_for(model: str, overrides: Mapping[str, Price] | None = None) -> Price:
    """Longest matching prefix across overrides, registered and default prices."""
    with _lock:
        table = {**DEFAULT_PRICES, **_registered, **(overrides or {})}
    best = max((p for p in table if _matches(model, p)), key=len, default=None)
    if best is None:
        if model not in _warned:
            _warned.add(model)
            log.info("no price known for model %r: counting its cost as 0", model)
        return (0.0, 0.0)
    return table[best]


def cost_usd(model: str, input_tokens: int, output_tokens: int, overrides: Mapping[str, Price] | None = None) -> float:
    pin, pout = price_for(model, overrides)
    return (input_tokens * pin + output_tokens * pout) / 1e6

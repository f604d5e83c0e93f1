"""A deterministic stand-in LLM for tests of code that calls an LLM."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from .base import Completion, LLMError, Message, check_messages
from .pricing import Price, cost_usd


def word_count(text: str | None) -> int:
    return len(text.split()) if text else 0


class ScriptedLLM:
    """Replays `replies` in order: a str is returned as the completion text, an
    Exception is raised. Running out raises LLMError. Every call's arguments are kept
    in `prompts`. Tokens are whitespace-separated words; cost uses the price table for
    `model` (0 for the default "scripted")."""

    def __init__(
        self,
        replies: list[str | Exception],
        *,
        model: str = "scripted",
        provider: str = "scripted",
        prices: Mapping[str, Price] | None = None,
    ):
        self._replies = list(replies)
        self._next = 0
        self._lock = threading.Lock()
        self.model = model
        self.provider = provider
        self.base_url = None
        self.name = f"{provider}:{model}"
        self._prices = prices
        self.prompts: list[dict] = []

    @property
    def remaining(self) -> int:
        return len(self._replies) - self._next

    def complete(
        self,
        messages: list[Message],
        *,
        system: str | None = None,
        max_tokens: int = 8192,
        temperature: float = 0.7,
        sample_index: int = 0,
    ) -> Completion:
        check_messages(messages)
        with self._lock:
            self.prompts.append(
                {
                    "messages": list(messages),
                    "system": system,
                    "max_tokens": max_tokens,
                    "temperature": temperature,
                    "sample_index": sample_index,
                }
            )
            if self._next >= len(self._replies):
                raise LLMError(f"ScriptedLLM: script exhausted after {len(self._replies)} replies")
            item = self._replies[self._next]
            self._next += 1
            raw_id = f"scripted-{self._next}"
        if isinstance(item, BaseException):
            raise item
        tin = word_count(system) + sum(word_count(m.content) for m in messages)
        tout = word_count(item)
        return Completion(
            text=item,
            model=self.model,
            provider=self.provider,
            input_tokens=tin,
            output_tokens=tout,
            latency_s=0.0,
            cost_usd=cost_usd(self.model, tin, tout, self._prices),
            cached=False,
            raw_id=raw_id,
            stop_reason="stop",
        )

"""Retry policy: exponential backoff with full jitter on TransientLLMError only.

Full jitter (sleep ~ U(0, min(cap, base * 2**(attempt-1)))) is the variant that spreads
retrying clients best (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015).
A server's retry-after wins over the jittered delay, capped at max_delay_s so a bad
header cannot stall a run.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from aka.errors import require

from .base import Completion, Message, TransientLLMError

log = logging.getLogger("aka.llm")
tenacity = require("tenacity", "an LLM proposer (its retries)")


@dataclass(frozen=True)
class RetryConfig:
    max_attempts: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("delays must be >= 0")


class _BackoffWait(tenacity.wait.wait_base):
    def __init__(self, cfg: RetryConfig, rng: random.Random):
        self.cfg = cfg
        self.rng = rng

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        hint = getattr(exc, "retry_after_s", None)
        if hint is not None:
            return min(float(hint), self.cfg.max_delay_s)
        ceiling = min(self.cfg.max_delay_s, self.cfg.base_delay_s * 2 ** (retry_state.attempt_number - 1))
        return self.rng.uniform(0.0, ceiling)


class RetryingLLM:
    """Wraps an LLM; retries TransientLLMError, lets every other error through at once.

    `sleep` and `seed` exist so tests can observe the delays without waiting them out.
    After the last attempt it raises TransientLLMError naming the attempt count.
    """

    def __init__(
        self,
        inner,
        max_attempts: int = 6,
        base_delay_s: float = 1.0,
        max_delay_s: float = 60.0,
        *,
        sleep: Callable[[float], None] = time.sleep,
        seed: int | None = None,
    ):
        self.inner = inner
        self.config = RetryConfig(max_attempts, base_delay_s, max_delay_s)
        self._sleep = sleep
        self._rng = random.Random(seed)
        self.attempts_total = 0  # every attempt made through this wrapper, for reporting
        self._count_lock = threading.Lock()

    @classmethod
    def from_config(cls, inner, config: RetryConfig, **kw) -> RetryingLLM:
        return cls(inner, config.max_attempts, config.base_delay_s, config.max_delay_s, **kw)

    name = property(lambda self: self.inner.name)
    provider = property(lambda self: self.inner.provider)
    model = property(lambda self: self.inner.model)
    base_url = property(lambda self: getattr(self.inner, "base_url", None))

    def _log_retry(self, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning("attempt %d/%d failed, retrying in %.2fs: %s", state.attempt_number, self.config.max_attempts, wait, exc)

    def complete(
        self,
        messages: list[Message],
        *,
        system: str | None = None,
        max_tokens: int = 8192,
        temperature: float = 0.7,
        sample_index: int = 0,
    ) -> Completion:
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(TransientLLMError),
            stop=tenacity.stop_after_attempt(self.config.max_attempts),
            wait=_BackoffWait(self.config, self._rng),
            sleep=self._sleep,
            before_sleep=self._log_retry,
            reraise=True,
        )
        attempts = 0

        def attempt() -> Completion:
            nonlocal attempts
            attempts += 1
            with self._count_lock:
                self.attempts_total += 1
            return self.inner.complete(
                messages, system=system, max_tokens=max_tokens, temperature=temperature, sample_index=sample_index
            )

        try:
            return retrying(attempt)
        except TransientLLMError as exc:
            # the same class (UnreachableLLMError stays one), so callers can tell why it gave up
            raise type(exc)(
                f"gave up after {attempts} attempt(s): {exc}", status=exc.status, retry_after_s=exc.retry_after_s
            ) from exc

    def __repr__(self) -> str:
        return f"RetryingLLM({self.inner!r}, {self.config})"

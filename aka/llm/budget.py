"""Usage accounting and hard limits on LLM spending.

Every completion that reaches the caller is charged, cache hits included (their cost is
0 but their tokens and the call count are real), so a run replayed from the cache stops
at the same call as the original did. `max_wall_s` is elapsed time since the Budget was
created or last start()ed, the run's deadline; Usage.wall_s is the time spent inside
LLM calls, retries and backoff included.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field

from .base import BudgetExceeded, Completion, Message


@dataclass
class ModelUsage:
    calls: int = 0
    cached_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0

    def add(self, c: Completion, wall_s: float) -> None:
        self.calls += 1
        self.cached_calls += int(c.cached)
        self.input_tokens += c.input_tokens
        self.output_tokens += c.output_tokens
        self.cost_usd += c.cost_usd
        self.wall_s += wall_s


@dataclass
class Usage(ModelUsage):
    by_model: dict[str, ModelUsage] = field(default_factory=dict)

    def add(self, c: Completion, wall_s: float) -> None:
        super().add(c, wall_s)
        self.by_model.setdefault(f"{c.provider}:{c.model}", ModelUsage()).add(c, wall_s)

    def as_dict(self) -> dict:
        return asdict(self)


class Budget:
    """Limits are inclusive ceilings: once a total reaches its limit, check() raises.
    A call already in flight finishes, so totals can end slightly above a limit."""

    LIMITS = ("max_calls", "max_input_tokens", "max_output_tokens", "max_cost_usd", "max_wall_s")

    def __init__(
        self,
        max_calls: int | None = None,
        max_input_tokens: int | None = None,
        max_output_tokens: int | None = None,
        max_cost_usd: float | None = None,
        max_wall_s: float | None = None,
    ):
        self.max_calls = max_calls
        self.max_input_tokens = max_input_tokens
        self.max_output_tokens = max_output_tokens
        self.max_cost_usd = max_cost_usd
        self.max_wall_s = max_wall_s
        for name in self.LIMITS:
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"{name} must be >= 0, got {v}")
        self.usage = Usage()
        self._lock = threading.Lock()
        self._t0 = time.monotonic()

    def start(self) -> None:
        """Restart the wall clock (e.g. when the agent loop, not the setup, begins)."""
        self._t0 = time.monotonic()

    def elapsed_s(self) -> float:
        return time.monotonic() - self._t0

    def charge(self, completion: Completion, wall_s: float | None = None) -> None:
        with self._lock:
            self.usage.add(completion, completion.latency_s if wall_s is None else wall_s)

    def _used(self) -> dict[str, float]:
        u = self.usage
        return {
            "max_calls": u.calls,
            "max_input_tokens": u.input_tokens,
            "max_output_tokens": u.output_tokens,
            "max_cost_usd": u.cost_usd,
            "max_wall_s": self.elapsed_s(),
        }

    def exceeded(self) -> BudgetExceeded | None:
        with self._lock:
            used = self._used()
        for name in self.LIMITS:
            limit = getattr(self, name)
            if limit is not None and used[name] >= limit:
                return BudgetExceeded(name, limit, used[name])
        return None

    def check(self) -> None:
        err = self.exceeded()
        if err is not None:
            raise err

    def __repr__(self) -> str:
        limits = ", ".join(f"{n}={getattr(self, n)}" for n in self.LIMITS if getattr(self, n) is not None)
        return f"Budget({limits})"


class BudgetedLLM:
    """check() before each call, charge() after it."""

    def __init__(self, inner, budget: Budget):
        self.inner = inner
        self.budget = budget

    name = property(lambda self: self.inner.name)
    provider = property(lambda self: self.inner.provider)
    model = property(lambda self: self.inner.model)
    base_url = property(lambda self: getattr(self.inner, "base_url", None))

    def complete(
        self,
        messages: list[Message],
        *,
        system: str | None = None,
        max_tokens: int = 8192,
        temperature: float = 0.7,
        sample_index: int = 0,
    ) -> Completion:
        self.budget.check()
        t0 = time.perf_counter()
        c = self.inner.complete(
            messages, system=system, max_tokens=max_tokens, temperature=temperature, sample_index=sample_index
        )
        self.budget.charge(c, time.perf_counter() - t0)
        return c

    def __repr__(self) -> str:
        return f"BudgetedLLM({self.inner!r}, {self.budget!r})"

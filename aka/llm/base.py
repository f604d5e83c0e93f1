"""The provider-neutral interface: messages in, one Completion out, typed errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

ROLES = ("user", "assistant")


@dataclass(frozen=True)
class Message:
    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"Message.role must be one of {ROLES}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"Message.content must be str, got {type(self.content).__name__}")


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    provider: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    cost_usd: float
    cached: bool = False
    raw_id: str | None = None
    # "stop" (natural end), "length" (hit max_tokens: the reply is truncated), or the
    # provider's own word for anything else (e.g. "refusal", "content_filter").
    stop_reason: str | None = None

    @property
    def truncated(self) -> bool:
        return self.stop_reason == "length"


@runtime_checkable
class LLM(Protocol):
    """What the agent talks to. Every implementation and wrapper in aka.llm has these
    attributes; `sample_index` only matters to the cache (it tells n>1 samples of the
    same prompt apart) and is ignored by providers."""

    name: str
    provider: str
    model: str
    base_url: str | None

    def complete(
        self,
        messages: list[Message],
        *,
        system: str | None = None,
        max_tokens: int = 8192,
        temperature: float = 0.7,
        sample_index: int = 0,
    ) -> Completion: ...


class LLMError(Exception):
    """Base of every error raised by aka.llm."""


class TransientLLMError(LLMError):
    """Worth retrying: rate limit, overload, 5xx, connection failure, timeout."""

    def __init__(self, message: str, *, status: int | None = None, retry_after_s: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


class UnreachableLLMError(TransientLLMError):
    """No connection to the server (refused, unknown host, TLS failure). Retried like any transient
    error, since a server may be restarting; once the retries run out the agent ends the run rather
    than going on to the next round, because a mistyped URL or a server that is down does not mend
    between rounds."""


class FatalLLMError(LLMError):
    """Retrying cannot help: bad key, unknown model, malformed or oversized request."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class ContextTooLongError(FatalLLMError):
    """The prompt does not fit the model's context window; the caller may shorten it."""


class BudgetExceeded(LLMError):
    """A Budget limit is reached. Catch it before LLMError: it means stop, not skip."""

    def __init__(self, limit: str, limit_value: float, used: float):
        super().__init__(f"budget exceeded: {limit}={limit_value:g} reached (used {used:g})")
        self.limit = limit
        self.limit_value = limit_value
        self.used = used


def messages_to_dicts(messages: list[Message]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def check_messages(messages: list[Message]) -> None:
    if not messages:
        raise ValueError("complete() needs at least one message")
    for m in messages:
        if not isinstance(m, Message):
            raise TypeError(f"expected Message, got {type(m).__name__}")

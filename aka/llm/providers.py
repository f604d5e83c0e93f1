"""Anthropic Messages and OpenAI Chat Completions through their official SDKs.

The SDKs' own retries are off (max_retries=0): RetryingLLM owns the policy, so one
attempt here is exactly one HTTP request. SDK errors become Transient/Fatal LLM errors
whose one-line message names provider, model and cause. API keys are handed to the SDK
client and never kept on these objects, put in messages, or logged.
"""

from __future__ import annotations

import email.utils
import os
import time
from collections.abc import Mapping
from typing import Any

from aka.errors import require

from .base import (
    Completion,
    ContextTooLongError,
    FatalLLMError,
    LLMError,
    Message,
    TransientLLMError,
    UnreachableLLMError,
    check_messages,
    messages_to_dicts,
)
from .pricing import Price, cost_usd

DEFAULT_TIMEOUT_S = 600.0
# Retryable HTTP statuses, the same set both SDKs retry on by default:
# 408 request timeout, 409 lock conflict, 429 rate limit, every 5xx (529 = Anthropic overloaded).
_TRANSIENT_STATUSES = {408, 409, 429}
_CONTEXT_MARKERS = ("too long", "context_length_exceeded", "maximum context length", "context window")
# OpenAI reasoning models accept only the default temperature and reject others with 400.
_OPENAI_FIXED_TEMPERATURE = ("o1", "o3", "o4", "gpt-5")
_MAX_MSG = 300


def _one_line(text: str, secret: str | None = None) -> str:
    if secret:
        text = text.replace(secret, "***")
    text = " ".join(str(text).split())
    return text if len(text) <= _MAX_MSG else text[: _MAX_MSG - 3] + "..."


def _server_message(body: object) -> str:
    """`error.message` in both wire formats (the openai SDK already unwrapped `error`)."""
    if isinstance(body, Mapping):
        err = body.get("error", body)
        if isinstance(err, Mapping):
            return str(err.get("message") or err.get("type") or "")
        if isinstance(err, str):
            return err
    if isinstance(body, str):
        return body
    return ""


def _error_code(body: object) -> str:
    if isinstance(body, Mapping):
        err = body.get("error", body)
        if isinstance(err, Mapping):
            return str(err.get("code") or err.get("type") or "")
    return ""


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, else `retry-after` as
    seconds or an HTTP date (RFC 9110 section 10.2.3)."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if ra is None:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(ra)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def map_sdk_error(exc: Exception, sdk: Any, provider: str, model: str, timeout_s: float, secret: str | None) -> LLMError:
    """Turn an `anthropic`/`openai` exception into a TransientLLMError or FatalLLMError."""
    where = f"{provider} {model}"
    if isinstance(exc, sdk.APITimeoutError):
        return TransientLLMError(f"{where}: no response within {timeout_s:g}s (timeout)")
    if isinstance(exc, sdk.APIConnectionError):
        request = getattr(exc, "request", None)
        url = f" to {request.url}" if request is not None else ""
        cause = exc.__cause__ or exc.__context__  # the SDK's message is only "Connection error."
        detail = f"{exc}" + (f" ({type(cause).__name__}: {cause})" if cause is not None else "")
        return UnreachableLLMError(f"{where}: cannot connect{url}: {_one_line(detail, secret)}")
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        detail = _one_line(_server_message(exc.body) or str(exc), secret)
        if status in _TRANSIENT_STATUSES or status >= 500:
            cause = {429: "rate limited", 529: "overloaded"}.get(status, "server error" if status >= 500 else "retryable")
            return TransientLLMError(
                f"{where}: HTTP {status} {cause}: {detail}",
                status=status,
                retry_after_s=parse_retry_after(exc.response.headers),
            )
        if status in (401, 403):
            env = _KEY_ENV.get(provider, "the API key")
            return FatalLLMError(
                f"{where}: HTTP {status} authentication failed (check {env}): {detail}", status=status
            )
        if status == 404:
            return FatalLLMError(f"{where}: HTTP 404 model or endpoint not found: {detail}", status=status)
        low = (detail + " " + _error_code(exc.body)).lower()
        if status == 413 or any(m in low for m in _CONTEXT_MARKERS):
            return ContextTooLongError(f"{where}: HTTP {status} context too long: {detail}", status=status)
        return FatalLLMError(f"{where}: HTTP {status} bad request: {detail}", status=status)
    return FatalLLMError(f"{where}: {type(exc).__name__}: {_one_line(str(exc), secret)}")


_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "openai-compat": "OPENAI_API_KEY"}


def _require_key(provider: str, model: str, api_key: str | None) -> str:
    key = api_key or os.environ.get(_KEY_ENV[provider])
    if not key:
        env = _KEY_ENV[provider]
        raise FatalLLMError(f"{provider} {model}: no API key: set the {env} environment variable (or pass api_key=)")
    return key


class _Provider:
    provider: str
    model: str
    base_url: str | None
    name: str

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    def _finish(self, text: str, model: str, tin: int, tout: int, t0: float, raw_id: str | None, stop: str | None) -> Completion:
        return Completion(
            text=text,
            model=model or self.model,
            provider=self.provider,
            input_tokens=tin,
            output_tokens=tout,
            latency_s=time.perf_counter() - t0,
            cost_usd=cost_usd(self.model, tin, tout, self._prices),
            cached=False,
            raw_id=raw_id,
            stop_reason=stop,
        )


class AnthropicLLM(_Provider):
    """Claude through `anthropic.Anthropic().messages.create`.

    The installed SDK (2.x) speaks API version 2026-10-21, which rejects `temperature`
    on every model, so `temperature` is accepted for interface compatibility and not sent.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        prices: Mapping[str, Price] | None = None,
    ):
        anthropic = require("anthropic", f"model=anthropic:{model}")
        self._sdk = anthropic
        self.model = model
        self.timeout_s = float(timeout_s)
        self._prices = prices
        key = _require_key(self.provider, model, api_key)
        self._client = anthropic.Anthropic(api_key=key, base_url=base_url, timeout=self.timeout_s, max_retries=0)
        self.base_url = str(self._client.base_url).rstrip("/")
        self.name = f"anthropic:{model}"

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
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "messages": messages_to_dicts(messages)}
        if system:
            kwargs["system"] = system
        t0 = time.perf_counter()
        try:
            resp = self._client.messages.create(**kwargs)
        except Exception as exc:  # noqa: BLE001 - every SDK failure is mapped, none escapes raw
            raise map_sdk_error(exc, self._sdk, self.provider, self.model, self.timeout_s, self._client.api_key) from exc
        text = "".join(getattr(b, "text", "") for b in resp.content if getattr(b, "type", None) == "text")
        stop = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length"}.get(resp.stop_reason or "", resp.stop_reason)
        u = resp.usage
        tin = (u.input_tokens or 0) + (u.cache_creation_input_tokens or 0) + (u.cache_read_input_tokens or 0)
        return self._finish(text, resp.model, tin, u.output_tokens or 0, t0, resp.id, stop)


class OpenAILLM(_Provider):
    """OpenAI Chat Completions, or any server speaking it (vLLM, SGLang, Ollama) via base_url.

    OpenAI's own API takes `max_completion_tokens` and its reasoning models (o-series,
    gpt-5*) reject a non-default temperature, so against api.openai.com those models get
    no temperature; OpenAI-compatible servers get `max_tokens` and the temperature as is.
    """

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        prices: Mapping[str, Price] | None = None,
        compat: bool | None = None,
    ):
        prefix = "openai-compat" if (base_url is not None if compat is None else compat) else "openai"
        openai = require("openai", f"model={prefix}:{model}")
        self._sdk = openai
        self.model = model
        self.timeout_s = float(timeout_s)
        self._prices = prices
        self.compat = (base_url is not None) if compat is None else compat
        self.provider = "openai-compat" if self.compat else "openai"
        if self.compat:
            # Local servers usually need no key; the SDK refuses an empty one.
            key = api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"
        else:
            key = _require_key(self.provider, model, api_key)
        self._client = openai.OpenAI(api_key=key, base_url=base_url, timeout=self.timeout_s, max_retries=0)
        self.base_url = str(self._client.base_url).rstrip("/")
        self.name = f"openai-compat:{model}@{self.base_url}" if self.compat else f"openai:{model}"

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
        wire = ([{"role": "system", "content": system}] if system else []) + messages_to_dicts(messages)
        kwargs: dict[str, Any] = {"model": self.model, "messages": wire}
        if self.compat:
            kwargs["max_tokens"] = max_tokens
            kwargs["temperature"] = temperature
        else:
            kwargs["max_completion_tokens"] = max_tokens
            if not self.model.startswith(_OPENAI_FIXED_TEMPERATURE):
                kwargs["temperature"] = temperature
        t0 = time.perf_counter()
        try:
            resp = self._client.chat.completions.create(**kwargs)
        except Exception as exc:  # noqa: BLE001
            raise map_sdk_error(exc, self._sdk, self.provider, self.model, self.timeout_s, self._client.api_key) from exc
        if not resp.choices:
            raise TransientLLMError(f"{self.provider} {self.model}: response had no choices")
        choice = resp.choices[0]
        text = choice.message.content or ""
        stop = choice.finish_reason
        u = resp.usage
        tin, tout = (u.prompt_tokens, u.completion_tokens) if u is not None else (0, 0)
        return self._finish(text, resp.model, tin, tout, t0, resp.id, stop)

"""Content-addressed response cache: one JSON file per request, keyed by sha256.

The key covers everything that changes the answer (provider, model, base_url, system,
messages, max_tokens, temperature) plus `sample_index`, so sample 3 of a prompt is its
own entry and replaying a run returns the same n samples in the same order. Files are
written to a temp name and os.replace()d, which is atomic on POSIX, so a crash leaves
either the old file or the new one, never half of one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import threading
from pathlib import Path

from aka.util import atomic_write_json

from .base import Completion, Message, messages_to_dicts

log = logging.getLogger("aka.llm")

CACHE_FORMAT = 1
MODES = ("use", "refresh", "off")


def cache_key(
    *,
    provider: str,
    model: str,
    base_url: str | None,
    system: str | None,
    messages: list[Message],
    max_tokens: int,
    temperature: float,
    sample_index: int,
) -> tuple[str, dict]:
    request = {
        "format": CACHE_FORMAT,
        "provider": provider,
        "model": model,
        "base_url": base_url,
        "system": system,
        "messages": messages_to_dicts(messages),
        "max_tokens": int(max_tokens),
        "temperature": float(temperature),
        "sample_index": int(sample_index),
    }
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest(), request


class CachedLLM:
    """mode "use": read, and write on a miss; "refresh": always call, then overwrite;
    "off": pass through. Errors are never cached."""

    def __init__(self, inner, cache_dir: str | os.PathLike, mode: str = "use"):
        if mode not in MODES:
            raise ValueError(f"cache mode must be one of {MODES}, got {mode!r}")
        self.inner = inner
        self.cache_dir = Path(cache_dir)
        self.mode = mode
        self.hits = 0
        self.misses = 0
        self._count_lock = threading.Lock()

    name = property(lambda self: self.inner.name)
    provider = property(lambda self: self.inner.provider)
    model = property(lambda self: self.inner.model)
    base_url = property(lambda self: getattr(self.inner, "base_url", None))

    def path_for(self, key: str) -> Path:
        return self.cache_dir / key[:2] / f"{key}.json"

    def _read(self, path: Path) -> Completion | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            fields = {f.name for f in dataclasses.fields(Completion)}
            stored = {k: v for k, v in data["completion"].items() if k in fields}
            return Completion(**stored)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable cache entry %s: %s", path, exc)
            return None

    def _write(self, path: Path, key: str, request: dict, completion: Completion) -> None:
        payload = {"key": key, "request": request, "completion": dataclasses.asdict(completion)}
        atomic_write_json(path, payload, ensure_ascii=False, indent=1)

    def complete(
        self,
        messages: list[Message],
        *,
        system: str | None = None,
        max_tokens: int = 8192,
        temperature: float = 0.7,
        sample_index: int = 0,
    ) -> Completion:
        call = dict(system=system, max_tokens=max_tokens, temperature=temperature, sample_index=sample_index)
        if self.mode == "off":
            return self.inner.complete(messages, **call)
        key, request = cache_key(
            provider=self.provider, model=self.model, base_url=self.base_url, messages=messages, **call
        )
        path = self.path_for(key)
        if self.mode == "use":
            hit = self._read(path)
            if hit is not None:
                with self._count_lock:
                    self.hits += 1
                return dataclasses.replace(hit, cached=True, latency_s=0.0, cost_usd=0.0)
        with self._count_lock:
            self.misses += 1
        completion = self.inner.complete(messages, **call)
        self._write(path, key, request, dataclasses.replace(completion, cached=False))
        return completion

    def __repr__(self) -> str:
        return f"CachedLLM({self.inner!r}, {str(self.cache_dir)!r}, mode={self.mode!r})"

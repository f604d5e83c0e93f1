"""A scripted fake of the Anthropic Messages and OpenAI Chat Completions HTTP APIs.

Good enough for the real `anthropic` and `openai` SDKs to parse its replies (shapes
checked against anthropic 2.14 `types/message.py` and openai 3.57
`types/chat/chat_completion.py`). Each request consumes the next script step:

    {"text": "..."}                                    200 with that reply
    {"status": 429, "headers": {"retry-after": "0"}}   error in the provider's format
    {"status": 400, "message": "prompt is too long"}   error with that message
    {"delay_s": 3, "text": "..."}                      wait first (client timeouts)

A request whose key is not `api_key` gets a 401 and consumes no step; a request after
the script ran out gets a 418 "script exhausted" (fatal, so a test fails fast).
Token counts are whitespace-separated words: input = system + every message, output =
the reply.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEY_HEADERS = ("authorization", "x-api-key")

ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    418: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
OPENAI_ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}
DEFAULT_MESSAGES = {
    400: "bad request",
    401: "invalid x-api-key",
    403: "permission denied",
    404: "model not found",
    418: "fake server: script exhausted",
    429: "rate limited",
    500: "internal server error",
    503: "service unavailable",
    529: "overloaded",
}


def count_words(text: str | None) -> int:
    return len(text.split()) if text else 0


def _content_words(content: Any) -> int:
    """Message content is a string or a list of {"type": "text", "text": ...} blocks."""
    if isinstance(content, str):
        return count_words(content)
    if isinstance(content, list):
        return sum(count_words(b.get("text")) for b in content if isinstance(b, dict))
    return 0


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]  # lower-case names; key values replaced by "<redacted>"
    body: dict
    key_ok: bool


class FakeLLMServer:
    def __init__(self, script: list[dict] | None = None, *, api_key: str | None = "test-key"):
        self.script = list(script or [])
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> FakeLLMServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopping.set()  # wakes handlers sleeping out a delay_s step
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        assert self._httpd is not None, "use FakeLLMServer as a context manager"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def anthropic_base_url(self) -> str:  # the SDK appends /v1/messages
        return self.url

    @property
    def openai_base_url(self) -> str:  # the SDK appends /chat/completions
        return self.url + "/v1"

    def add(self, *steps: dict) -> None:
        with self._lock:
            self.script.extend(steps)

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    # -- request handling (called from handler threads) -------------------------------
    def _key_ok(self, headers: dict[str, str]) -> bool:
        if self.api_key is None:
            return True
        bearer = headers.get("authorization", "")
        return headers.get("x-api-key") == self.api_key or bearer == f"Bearer {self.api_key}"

    def _next_step(self, kind: str, path: str, headers: dict[str, str], body: dict) -> dict:
        key_ok = self._key_ok(headers)
        shown = {k: ("<redacted>" if k in KEY_HEADERS else v) for k, v in headers.items()}
        with self._lock:
            self.requests.append(RecordedRequest(path, shown, body, key_ok))
            if not key_ok:
                return {"status": 401}
            if kind == "anthropic" and "anthropic-version" not in headers:
                return {"status": 400, "message": "anthropic-version: header is required"}
            if not self.script:
                return {"status": 418}
            return self.script.pop(0)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeLLMServer
    protocol_version = "HTTP/1.0"  # one request per connection: nothing lingers after a test

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        headers = {k.lower(): v for k, v in self.headers.items()}
        if self.path.rstrip("/") == "/v1/messages":
            kind = "anthropic"
        elif self.path.rstrip("/") == "/v1/chat/completions":
            kind = "openai"
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        step = self.fake._next_step(kind, self.path, headers, body)
        delay = float(step.get("delay_s", 0))
        if delay and self.fake._stopping.wait(delay):
            return
        status = int(step.get("status", 200))
        extra = dict(step.get("headers", {}))
        if status != 200:
            self._send(status, self._error_body(kind, status, step.get("message")), extra)
        elif kind == "anthropic":
            self._send(200, self._anthropic_reply(body, step["text"]), extra)
        else:
            self._send(200, self._openai_reply(body, step["text"]), extra)

    def _anthropic_reply(self, req: dict, text: str) -> dict:
        tin = _content_words(req.get("system")) + sum(_content_words(m.get("content")) for m in req.get("messages", []))
        return {
            "id": f"msg_fake_{len(self.fake.requests)}",
            "type": "message",
            "role": "assistant",
            "model": req.get("model", ""),
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": tin, "output_tokens": count_words(text)},
        }

    def _openai_reply(self, req: dict, text: str) -> dict:
        tin = sum(_content_words(m.get("content")) for m in req.get("messages", []))
        tout = count_words(text)
        return {
            "id": f"chatcmpl-fake-{len(self.fake.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.get("model", ""),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop", "logprobs": None}
            ],
            "usage": {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout},
        }

    @staticmethod
    def _error_body(kind: str, status: int, message: str | None) -> dict:
        msg = message or DEFAULT_MESSAGES.get(status, f"error {status}")
        if kind == "anthropic":
            etype = ANTHROPIC_ERROR_TYPES.get(status, "api_error")
            return {"type": "error", "error": {"type": etype, "message": msg}}
        code = OPENAI_ERROR_CODES.get(status)
        if status == 400 and "too long" in msg:
            code = "context_length_exceeded"
        etype = "server_error" if status >= 500 else "invalid_request_error"
        return {"error": {"message": msg, "type": etype, "param": None, "code": code}}

    def _send(self, status: int, payload: dict, extra_headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in (extra_headers or {}).items():
                self.send_header(k, str(v))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test); nothing to deliver

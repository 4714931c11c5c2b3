"""The bench's request function: one OpenAI-compatible request (`Target`, `Job`) sent through a
transport (`inhouse.http1.client.StreamPool`), its streamed answer read into an `Outcome`.

Kept apart from the transport, as vLLM's `benchmarks/endpoint_request_func.py` keeps its
request functions apart from the session: what a response means here, the transport knows
nothing of. Per SSE chunk the cost is one parser callback, a `bytes.find` and one JSON parse, so
one process keeps clean timing well past 20,000 chunks/s.

Timing follows vLLM's request function: t_send is taken before a connection is taken from the
pool; TTFT at the first `data:` message with non-empty `choices`; one ITL sample per later such
message; the end at the last one. All messages of one read share its arrival timestamp (the
time the bytes reached us; parsing time is the client's, not the server's).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from inhouse.bench.metrics import Outcome
from inhouse.errors import SpecError
from inhouse.http1.client import StreamPool
from inhouse.http1.sse import EventSplitter, payload

try:  # orjson parses a chunk 3-5x faster; the stdlib is the fallback.
    import orjson

    loads: Callable[[bytes], Any] = orjson.loads
    JSON_LIBRARY = "orjson"
except ImportError:  # pragma: no cover - depends on the environment
    loads = json.loads
    JSON_LIBRARY = "json"

MAX_ERROR_BODY_BYTES = 2000
BAD_MESSAGE = "bad SSE message: "
SSE_STARTS = (b"data:", b":", b"event:", b"id:", b"retry:")  # how an event stream begins


@dataclass(frozen=True, slots=True)
class Target:
    """Where requests go: `http://host:port[/prefix]`."""

    host: str
    port: int
    prefix: str = ""
    api_key: str | None = None

    @classmethod
    def parse(cls, url: str, api_key: str | None = None) -> Target:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname:
            raise SpecError(
                f"--target {url!r}: use http://HOST:PORT (https is not supported by the bench "
                "client; put it behind a local TLS terminator or use plain HTTP)"
            )
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        return cls(parts.hostname, parts.port or 80, prefix, api_key)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}{self.prefix}"

    def head(self, path: str, content_length: int) -> bytes:
        lines = [
            f"POST {self.prefix}{path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Content-Type: application/json",
            "Accept: text/event-stream",
            f"Content-Length: {content_length}",
        ]
        if self.api_key:
            lines.append(f"Authorization: Bearer {self.api_key}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@dataclass(frozen=True, slots=True)
class Job:
    """One request to send: `body` is the JSON payload; `t_sched` a `perf_counter` time."""

    index: int
    t_sched: float
    path: str
    body: bytes
    keep_text: bool = False
    timeout_s: float = 600.0
    trace: bool = False  # calibration: keep the server's per-chunk "t" (the mock server's)


async def send_request(transport: StreamPool, target: Target, job: Job) -> Outcome:
    """Send now; the outcome says what happened (never raises for HTTP or socket errors)."""
    outcome = Outcome(job.index, job.t_sched)
    outcome.t_send = time.perf_counter()
    stream = OpenAIStream(outcome, job.keep_text, job.trace)
    request = target.head(job.path, len(job.body)) + job.body
    try:
        await transport.handle(request, stream, job.timeout_s)
    except OSError as exc:
        outcome.success = False
        outcome.error = f"{type(exc).__name__}: {exc}"
    except asyncio.CancelledError:
        outcome.success = False
        outcome.error = "cancelled (interrupted)"
    return outcome


class OpenAIStream:
    """An OpenAI-compatible answer, streamed (SSE) or whole (JSON), read into its `Outcome`: a
    `http1.client.Receiver`."""

    __slots__ = ("body", "events", "has_done", "has_finish", "is_sse", "keep_text", "last_t",
                 "last_token_t", "last_usage_tokens", "outcome", "text_parts", "trace")  # fmt: skip

    def __init__(self, outcome: Outcome, keep_text: bool, trace: bool = False) -> None:
        self.outcome = outcome
        self.keep_text = keep_text
        self.trace = trace
        self.restart()

    def restart(self) -> None:
        o = self.outcome
        o.error = ""
        self.is_sse = False
        self.has_done = False  # `data: [DONE]` came: the stream was not cut short
        self.has_finish = False  # a choice came with its `finish_reason`: the answer is whole
        self.body = b""  # a body that is not an SSE stream: an error, or a whole answer
        self.events = EventSplitter()
        self.last_t = o.t_send
        self.last_usage_tokens = 0
        self.last_token_t = o.t_send  # when the last chunk that carried tokens came
        self.text_parts: list[str] | None = [] if self.keep_text else None
        if self.trace:
            o.server_times_s = []

    # -- http1.client.Receiver ------------------------------------------------------------

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.outcome.status = status
        for name, value in headers:
            if name == b"content-type" and value.strip().lower().startswith(b"text/event-stream"):
                self.is_sse = True

    def on_body(self, data: bytes, now: float) -> None:
        if not self.is_sse and not self.body and self.outcome.status == 200:
            # NOTE: an event stream under another content type (a proxy rewrote it) is read
            # as one all the same, by how it starts.
            self.is_sse = data.lstrip().startswith(SSE_STARTS)
        if not (self.is_sse and self.outcome.status == 200):
            self.body += data
            return
        for event in self.events.split(data):
            self._on_event(event, now)

    def on_lost(self, reason: str) -> None:
        o = self.outcome
        o.success = False
        o.error = o.error or reason

    def on_timeout(self, timeout_s: float) -> None:
        self.outcome.error = f"timed out after {timeout_s:g} s"

    def on_end(self, now: float) -> None:
        o = self.outcome
        if o.status == 200 and self.is_sse:
            rest = self.events.rest.strip()
            if rest:  # an event with no blank line after it: whole, or cut inside
                error = o.error
                self._on_event(rest, now)
                is_unparsed = o.error != error and o.error.startswith(BAD_MESSAGE)
                if is_unparsed and rest.startswith(b"data:"):
                    o.error = f"the stream ended mid-event (cut short): {rest[:200]!r}"
            if o.num_chunks and not (self.has_done or self.has_finish):
                # A stream the server closed (or ended) before `[DONE]`, with no choice
                # finished, was cut short.
                o.error = o.error or "the stream ended without `data: [DONE]` (cut short)"
            if o.num_chunks:
                # NOTE: `vllm bench serve` counts a stream that ended in an error event as a
                # success once it had a token; we do not: the client did not get its answer.
                # Its timings up to the error stay recorded.
                o.success = not o.error
                o.latency_s = self.last_t - o.t_send
            else:
                o.error = o.error or "Never received a valid chunk to calculate TTFT."
        elif o.status == 200:
            self._on_whole(now)
        else:
            body = self.body[:MAX_ERROR_BODY_BYTES].decode("utf-8", "replace")
            o.error = f"HTTP {o.status}: {body}"
        if self.text_parts is not None:
            o.text = "".join(self.text_parts)

    # -- reading the answer ---------------------------------------------------------------

    def _on_event(self, event: bytes, now: float) -> None:
        message = payload(event)
        if message == b"[DONE]":
            self.has_done = True
            return
        if message is None:
            return
        try:
            data = loads(message)
        except ValueError:
            self.outcome.error = f"{BAD_MESSAGE}{message[:200]!r}"
            return
        try:
            self._on_data(data, now)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError):
            self.outcome.error = f"SSE message of an unexpected shape: {message[:200]!r}"

    def _on_data(self, data: object, now: float) -> None:
        if not isinstance(data, dict):
            raise TypeError("an SSE message is a JSON object")
        o = self.outcome
        choices = data.get("choices")
        if choices:
            self._on_choice(data, choices[0], now)
        elif (usage := data.get("usage")) is not None:
            self._on_usage(usage)
        elif "error" in data:
            error = data["error"]
            message_text = error.get("message") if isinstance(error, dict) else error
            o.error = f"error event in stream: {message_text}"
        elif data.get("object") == "error":  # vLLM's older shape
            o.error = f"error event in stream: {data.get('message')}"

    def _on_choice(self, data: dict[str, Any], choice: dict[str, Any], now: float) -> None:
        o = self.outcome
        if o.num_chunks == 0:
            o.ttft_s = now - o.t_send
        else:
            o.itl_s.append(now - self.last_t)
        delta = choice.get("delta")
        if delta is not None:
            text = delta.get("content") or ""
            has_content = bool(
                text or delta.get("reasoning_content") or delta.get("reasoning")
            ) or bool(delta.get("tool_calls"))
        else:
            text = choice.get("text") or ""
            has_content = bool(text)
        if not isinstance(text, str):
            raise TypeError("the chunk's text is not a string")
        if choice.get("finish_reason") is not None:
            self.has_finish = True
        if has_content:
            o.num_token_chunks += 1
            if o.ttft_content_s is None:
                o.ttft_content_s = now - o.t_send
        if self.text_parts is not None and text:
            self.text_parts.append(text)
        usage = data.get("usage")
        if usage:
            self._on_usage(usage)  # some servers put it on the last token chunk
            self._per_token(usage, now)
        if self.trace and o.server_times_s is not None:
            o.server_times_s.append(float(data.get("t", 0.0)))
        o.num_chunks += 1
        self.last_t = now

    def _on_usage(self, usage: dict[str, Any]) -> None:
        """Usage counts, the latest of each kept; a count that is not a whole number >= 0
        raises ValueError (it would break the run's totals later, far from the answer that
        sent it)."""
        if not isinstance(usage, dict):
            raise TypeError("usage is not an object")
        o = self.outcome
        if (completion := _token_count(usage.get("completion_tokens"))) is not None:
            o.completion_tokens = completion
        if (prompt := _token_count(usage.get("prompt_tokens"))) is not None:
            o.prompt_tokens = prompt
        details = usage.get("prompt_tokens_details")
        cached = _token_count(details.get("cached_tokens")) if isinstance(details, dict) else None
        if cached is not None:
            o.cached_tokens = cached

    def _per_token(self, usage: dict[str, Any], now: float) -> None:
        """Per-token gaps from continuous usage stats: a chunk carrying k tokens gives k gaps
        of (time since the last chunk that carried tokens)/k; tokens that came with the first
        tokens give gaps of 0. A chunk with no token (the role chunk) gives none."""
        count = usage.get("completion_tokens")
        if not isinstance(count, int):
            return
        k = count - self.last_usage_tokens
        o = self.outcome
        if o.per_token_itl_s is None:
            o.per_token_itl_s = []
        if k <= 0:
            return
        if self.last_usage_tokens == 0:
            o.per_token_itl_s.extend([0.0] * (k - 1))
        else:
            gap = (now - self.last_token_t) / k
            o.per_token_itl_s.extend([gap] * k)
        self.last_usage_tokens = count
        self.last_token_t = now

    def _on_whole(self, now: float) -> None:
        """A non-streamed answer: TTFT and E2EL are both the time of the whole body."""
        o = self.outcome
        try:
            data = loads(self.body)
        except ValueError:
            o.error = f"bad JSON body: {self.body[:200]!r}"
            return
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices:
            o.error = "response has no choices"
            return
        try:
            text = self._read_whole(data, choices)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError):
            o.error = f"response of an unexpected shape: {self.body[:200]!r}"
            return
        o.success = True
        o.ttft_s = o.latency_s = now - o.t_send
        o.num_chunks = o.num_token_chunks = 1
        if self.text_parts is not None and text:
            self.text_parts.append(text)

    def _read_whole(self, data: dict[str, Any], choices: Any) -> str | None:
        choice = choices[0]
        message = choice.get("message")
        text = message.get("content") if message is not None else choice.get("text")
        if text is not None and not isinstance(text, str):
            raise TypeError("the answer's text is not a string")
        self._on_usage(data.get("usage") or {})
        return text


def _token_count(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{value!r} is not a token count")
    return value

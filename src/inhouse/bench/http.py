"""A lean HTTP/1.1 client for OpenAI-compatible streaming, on asyncio protocols.

Why not httpx or aiohttp: per SSE chunk they run several coroutines and buffer layers; here a
chunk costs one `data_received` call, a `bytes.find` and one JSON parse, so one process keeps
clean timing well past 20,000 chunks/s. Keep-alive connections are pooled (and opened ahead of
the run), so a burst of requests never becomes a storm of TCP handshakes.

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
from typing import Any, cast
from urllib.parse import urlsplit

from inhouse.bench.metrics import Outcome
from inhouse.errors import SpecError

try:  # orjson parses a chunk 3-5x faster; the stdlib is the fallback.
    import orjson

    loads: Callable[[bytes], Any] = orjson.loads
    JSON_LIBRARY = "orjson"
except ImportError:  # pragma: no cover - depends on the environment
    loads = json.loads
    JSON_LIBRARY = "json"

MAX_ERROR_BODY_BYTES = 2000
_HEAD, _BODY, _DONE = 0, 1, 2


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


class _Exchange:
    """Parser state of one request/response."""

    __slots__ = (
        "buffer",
        "chunk_left",
        "chunked",
        "content_length",
        "done",
        "event_buffer",
        "is_sse",
        "last_t",
        "last_usage_tokens",
        "outcome",
        "received",
        "reusable",
        "state",
        "t_ref",
        "text_parts",
        "trace",
    )

    def __init__(
        self, outcome: Outcome, keep_text: bool, t_ref: float, trace: bool = False
    ) -> None:
        self.outcome = outcome
        self.t_ref = t_ref
        self.state = _HEAD
        self.buffer = b""
        self.event_buffer = b""
        self.chunked = False
        self.chunk_left = -1  # bytes of chunk data left; -1: a size line comes next
        self.content_length = -1
        self.received = 0
        self.is_sse = False
        self.reusable = True
        self.last_t = t_ref
        self.last_usage_tokens = 0
        self.text_parts: list[str] | None = [] if keep_text else None
        self.done: asyncio.Future[None] | None = None
        self.trace = trace
        if trace:
            outcome.server_times_s = []


class Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.is_open = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # NOTE: uvloop's transports are not asyncio.Transport subclasses; no isinstance check.
        self.transport = cast(asyncio.Transport, transport)
        self.is_open = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.is_open = False
        ex = self.exchange
        if ex is not None and ex.state != _DONE:
            if ex.state == _BODY and not ex.chunked and ex.content_length < 0:
                self._finish(ex, time.perf_counter())  # body delimited by close
            else:
                ex.outcome.success = False
                ex.outcome.error = ex.outcome.error or f"connection lost: {exc or 'closed'}"
                self._complete(ex)

    def send(self, data: bytes, exchange: _Exchange) -> None:
        assert self.transport is not None
        self.exchange = exchange
        self.transport.write(data)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # -- parsing ---------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.feed(data, time.perf_counter())

    def feed(self, data: bytes, now: float) -> None:
        """Bytes that arrived at `now` (`perf_counter` seconds)."""
        ex = self.exchange
        if ex is None or ex.state == _DONE:
            return
        if ex.state == _HEAD:
            ex.buffer += data
            end = ex.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = ex.buffer[:end], ex.buffer[end + 4 :]
            ex.buffer = b""
            self._parse_head(ex, head)
            ex.state = _BODY
            if ex.content_length == 0:
                self._finish(ex, now)
                return
        if ex.chunked:
            self._feed_chunked(ex, data, now)
        else:
            self._feed_body(ex, data, now)
            ex.received += len(data)
            if 0 <= ex.content_length <= ex.received:
                self._finish(ex, now)

    def _parse_head(self, ex: _Exchange, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            ex.outcome.status = int(parts[1])
        except (IndexError, ValueError):
            ex.outcome.status = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            value = value.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value:
                ex.chunked = True
            elif name == b"content-length":
                ex.content_length = int(value)
            elif name == b"content-type" and value.startswith(b"text/event-stream"):
                ex.is_sse = True
            elif name == b"connection" and value == b"close":
                ex.reusable = False
        if not ex.chunked and ex.content_length < 0:
            ex.reusable = False  # the body ends when the server closes

    def _feed_chunked(self, ex: _Exchange, data: bytes, now: float) -> None:
        buf = ex.buffer + data if ex.buffer else data
        pos = 0
        size = len(buf)
        while pos < size:
            if ex.chunk_left < 0:
                line_end = buf.find(b"\r\n", pos)
                if line_end < 0:
                    break
                length = int(buf[pos:line_end].split(b";", 1)[0], 16)
                pos = line_end + 2
                if length == 0:
                    ex.buffer = b""
                    self._finish(ex, now)
                    return
                ex.chunk_left = length
            take = min(ex.chunk_left, size - pos)
            if take:
                self._feed_body(ex, buf[pos : pos + take], now)
                pos += take
                ex.chunk_left -= take
            if ex.chunk_left == 0:
                if size - pos < 2:
                    break  # the CRLF after the chunk has not arrived yet
                pos += 2
                ex.chunk_left = -1
        ex.buffer = buf[pos:]

    def _feed_body(self, ex: _Exchange, data: bytes, now: float) -> None:
        if not (ex.is_sse and ex.outcome.status == 200):
            ex.event_buffer += data
            return
        buf = ex.event_buffer + data if ex.event_buffer else data
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            self._on_message(ex, buf[start:end].strip(), now)
            start = end + 2
        ex.event_buffer = buf[start:]

    def _on_message(self, ex: _Exchange, message: bytes, now: float) -> None:
        if not message or message.startswith(b":"):
            return  # SSE comment / ping
        if message.startswith(b"data:"):
            message = message[5:].lstrip()
        if message == b"[DONE]":
            return
        try:
            data = loads(message)
        except ValueError:
            ex.outcome.error = f"bad SSE message: {message[:200]!r}"
            return
        if not isinstance(data, dict):
            return
        o = ex.outcome
        choices = data.get("choices")
        if choices:
            if o.num_chunks == 0:
                o.ttft_s = now - o.t_send
            else:
                o.itl_s.append(now - ex.last_t)
            choice = choices[0]
            delta = choice.get("delta")
            if delta is not None:
                text = delta.get("content") or ""
                has_content = bool(
                    text or delta.get("reasoning_content") or delta.get("reasoning")
                ) or bool(delta.get("tool_calls"))
            else:
                text = choice.get("text") or ""
                has_content = bool(text)
            if has_content and o.ttft_content_s is None:
                o.ttft_content_s = now - o.t_send
            if ex.text_parts is not None and text:
                ex.text_parts.append(text)
            usage = data.get("usage")
            if usage:
                self._per_token(ex, usage, now)
            if ex.trace and o.server_times_s is not None:
                o.server_times_s.append(float(data.get("t", 0.0)))
            o.num_chunks += 1
            ex.last_t = now
        elif (usage := data.get("usage")) is not None:
            o.completion_tokens = usage.get("completion_tokens")
            o.prompt_tokens = usage.get("prompt_tokens")
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                o.cached_tokens = details.get("cached_tokens")
        elif "error" in data:
            error = data["error"]
            message_text = error.get("message") if isinstance(error, dict) else error
            o.error = f"error event in stream: {message_text}"

    @staticmethod
    def _per_token(ex: _Exchange, usage: dict[str, Any], now: float) -> None:
        """Per-token gaps from continuous usage stats: a chunk carrying k tokens gives k gaps
        of (chunk gap)/k; tokens that came with the first chunk give gaps of 0."""
        count = usage.get("completion_tokens")
        if not isinstance(count, int):
            return
        k = count - ex.last_usage_tokens
        ex.last_usage_tokens = count
        o = ex.outcome
        if o.per_token_itl_s is None:
            o.per_token_itl_s = []
        if k <= 0:
            return
        if o.num_chunks == 0:
            o.per_token_itl_s.extend([0.0] * (k - 1))
        else:
            gap = (now - ex.last_t) / k
            o.per_token_itl_s.extend([gap] * k)

    def _finish(self, ex: _Exchange, now: float) -> None:
        o = ex.outcome
        if o.status == 200 and ex.is_sse:
            if ex.event_buffer.strip():
                self._on_message(ex, ex.event_buffer.strip(), now)
            if o.num_chunks:
                # NOTE: `vllm bench serve` counts a stream that ended in an error event as a
                # success once it had a token; we do not: the client did not get its answer.
                # Its timings up to the error stay recorded.
                o.success = not o.error
                o.latency_s = ex.last_t - o.t_send
            else:
                o.error = o.error or "Never received a valid chunk to calculate TTFT."
        elif o.status == 200:
            self._finish_json(ex, now)
        else:
            body = ex.event_buffer[:MAX_ERROR_BODY_BYTES].decode("utf-8", "replace")
            o.error = f"HTTP {o.status}: {body}"
        if ex.text_parts is not None:
            o.text = "".join(ex.text_parts)
        self._complete(ex)

    def _finish_json(self, ex: _Exchange, now: float) -> None:
        """A non-streamed answer: TTFT and E2EL are both the time of the whole body."""
        o = ex.outcome
        try:
            data = loads(ex.event_buffer)
        except ValueError:
            o.error = f"bad JSON body: {ex.event_buffer[:200]!r}"
            return
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices:
            o.error = "response has no choices"
            return
        o.success = True
        o.ttft_s = o.latency_s = now - o.t_send
        o.num_chunks = 1
        choice = choices[0]
        message = choice.get("message")
        text = (message or {}).get("content") if message is not None else choice.get("text")
        if ex.text_parts is not None and text:
            ex.text_parts.append(text)
        usage = data.get("usage") or {}
        o.completion_tokens = usage.get("completion_tokens")
        o.prompt_tokens = usage.get("prompt_tokens")
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            o.cached_tokens = details.get("cached_tokens")

    def _complete(self, ex: _Exchange) -> None:
        ex.state = _DONE
        if ex.done is not None and not ex.done.done():
            ex.done.set_result(None)


def _expire(conn: Connection, outcome: Outcome, timeout_s: float) -> None:
    outcome.error = f"timed out after {timeout_s:g} s"
    conn.abort()  # connection_lost completes the exchange as failed


class Client:
    """A pool of keep-alive connections to one target, sending `Job`s."""

    def __init__(self, target: Target, kernel_timestamps: bool = False) -> None:
        self.target = target
        self.kernel_timestamps = kernel_timestamps
        self._idle: list[Connection] = []
        self.num_opened = 0
        self.num_open_errors = 0
        self.num_retries = 0

    async def _open(self) -> Connection:
        loop = asyncio.get_running_loop()
        conn: Connection
        if self.kernel_timestamps:
            from inhouse.bench.kernel_ts import open_timestamped

            conn = await open_timestamped(self.target.host, self.target.port)
        else:
            _, conn = await loop.create_connection(Connection, self.target.host, self.target.port)
        self.num_opened += 1
        return conn

    async def prewarm(self, num_connections: int) -> None:
        """Open connections ahead of the run (a burst then finds them ready)."""
        opened = await asyncio.gather(
            *(self._open() for _ in range(num_connections)), return_exceptions=True
        )
        for conn in opened:
            if isinstance(conn, Connection):
                self._idle.append(conn)
            else:
                self.num_open_errors += 1

    async def send(self, job: Job) -> Outcome:
        """Send now; the outcome says what happened (never raises for HTTP or socket errors).

        A kept-alive connection the server closed while idle fails before any byte comes back;
        such a request is sent once more on a new connection (t_send stays the first one)."""
        outcome = Outcome(job.index, job.t_sched)
        outcome.t_send = time.perf_counter()
        conn: Connection | None = None
        try:
            conn = self._take()
            reused = conn is not None
            if conn is None:
                conn = await self._open()
            await self._exchange(conn, job, outcome)
            if reused and outcome.status == 0 and not outcome.error.startswith("timed out"):
                self.num_retries += 1
                outcome.error = ""
                conn = await self._open()
                await self._exchange(conn, job, outcome)
        except OSError as exc:
            outcome.success = False
            outcome.error = f"{type(exc).__name__}: {exc}"
            self.num_open_errors += 1
        except asyncio.CancelledError:
            if conn is not None:
                conn.abort()
            outcome.success = False
            outcome.error = "cancelled (interrupted)"
        return outcome

    async def _exchange(self, conn: Connection, job: Job, outcome: Outcome) -> None:
        loop = asyncio.get_running_loop()
        exchange = _Exchange(outcome, job.keep_text, outcome.t_send, job.trace)
        exchange.done = loop.create_future()
        conn.send(self.target.head(job.path, len(job.body)) + job.body, exchange)
        timer = loop.call_later(job.timeout_s, _expire, conn, outcome, job.timeout_s)
        try:
            await exchange.done
        finally:
            timer.cancel()
        if exchange.reusable and conn.is_open and outcome.status:
            self._idle.append(conn)
        else:
            conn.abort()

    def _take(self) -> Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.is_open:
                return conn
        return None

    def close(self) -> None:
        for conn in self._idle:
            conn.abort()
        self._idle.clear()

"""A minimal OpenAI-compatible streaming server with known timing, to check the client.

Every request streams `max_tokens` one-token chunks: the first `ttft_s` after the request
arrived, then one every `itl_s`, on an absolute schedule (no drift), then a usage chunk and
`[DONE]`. Chat requests get vLLM's role chunk first (optionally `role_chunk_lead_s` before the
first token, as some servers do). The server records how late each write was against its
schedule, so a client's timing error can be told apart from the server's. Prompt tokens are
counted as characters / 4 (the simulated engine's tokenizer); `cached_fraction` of them are
reported as cached, and `/metrics` exposes vLLM's prefix-cache counters to match.

Raw asyncio protocol on purpose: a few microseconds per chunk, so the server stays out of the
way of the client it measures. Loopback only; for tests and `benchmarks/`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

try:
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover
    _loads = json.loads


@dataclass
class MockTiming:
    ttft_s: float = 0.05
    itl_s: float = 0.01
    role_chunk_lead_s: float = 0.0
    cached_fraction: float = 0.0
    fail_status: int | None = None  # answer every generation request with this status


@dataclass
class MockStats:
    num_requests: int = 0
    num_chunks: int = 0
    lateness_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0


class _Handler(asyncio.Protocol):
    def __init__(self, server: MockServer) -> None:
        self.server = server
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            method, path = head.split(" ", 2)[:2]
            self.server.handle(self, method, path, body)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class MockServer:
    def __init__(self, timing: MockTiming | None = None, model: str = "mock") -> None:
        self.timing = timing or MockTiming()
        self.model = model
        self.stats = MockStats()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Handler(self), host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # -- requests --------------------------------------------------------------------------

    def handle(self, conn: _Handler, method: str, path: str, body: bytes) -> None:
        if method == "GET" and path.endswith("/v1/models"):
            self._json(conn, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        elif method == "GET" and path.endswith("/metrics"):
            s = self.stats
            text = (
                f'vllm:prefix_cache_queries_total{{engine="0",model_name="{self.model}"}} '
                f"{float(s.prompt_tokens)}\n"
                f'vllm:prefix_cache_hits_total{{engine="0",model_name="{self.model}"}} '
                f"{float(s.cached_tokens)}\n"
            )
            self._reply(conn, 200, "text/plain; version=0.0.4", text.encode())
        elif method == "POST" and path.endswith("completions"):
            self._generate(conn, path.endswith("chat/completions"), _loads(body))
        else:
            self._reply(conn, 404, "application/json", b'{"detail":"Not Found"}')

    def _reply(self, conn: _Handler, status: int, kind: str, data: bytes) -> None:
        head = (
            f"HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {len(data)}\r\n\r\n"
        )
        conn.write(head.encode() + data)

    def _json(self, conn: _Handler, body: dict[str, Any]) -> None:
        self._reply(conn, 200, "application/json", json.dumps(body).encode())

    def _generate(self, conn: _Handler, chat: bool, body: dict[str, Any]) -> None:
        timing = self.timing
        self.stats.num_requests += 1
        if timing.fail_status is not None:
            error = {"error": {"message": "injected", "type": "X", "param": None, "code": 500}}
            self._reply(conn, timing.fail_status, "application/json", json.dumps(error).encode())
            return
        if chat:
            text = "".join(str(m.get("content", "")) for m in body.get("messages", []))
        else:
            text = str(body.get("prompt", ""))
        prompt_tokens = max(1, len(text) // 4)
        cached = int(prompt_tokens * timing.cached_fraction)
        self.stats.prompt_tokens += prompt_tokens
        self.stats.cached_tokens += cached
        conn.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        stream = _Stream(self, conn, chat, int(body.get("max_tokens") or 16), prompt_tokens, cached)
        start = time.perf_counter()
        loop = asyncio.get_running_loop()
        offset = loop.time() - start
        if chat:
            lead = max(timing.ttft_s - timing.role_chunk_lead_s, 0.0)
            if timing.role_chunk_lead_s > 0:
                loop.call_at(start + lead + offset, stream.role, start + lead)
            else:
                stream.pending_role = True
        for i in range(stream.num_tokens):
            at = start + timing.ttft_s + i * timing.itl_s
            loop.call_at(at + offset, stream.token, i, at)


class _Stream:
    def __init__(
        self,
        server: MockServer,
        conn: _Handler,
        chat: bool,
        num_tokens: int,
        prompt_tokens: int,
        cached: int,
    ) -> None:
        self.server = server
        self.conn = conn
        self.chat = chat
        self.num_tokens = num_tokens
        self.prompt_tokens = prompt_tokens
        self.cached = cached
        self.pending_role = False

    def _send(self, payload: str) -> None:
        data = f"data: {payload}\n\n".encode()
        self.conn.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def role(self, at: float) -> None:
        self.server.stats.lateness_s.append(time.perf_counter() - at)
        self._send(
            '{"object":"chat.completion.chunk","choices":[{"index":0,"delta":'
            '{"role":"assistant","content":""},"finish_reason":null}]}'
        )

    def token(self, index: int, at: float) -> None:
        now = time.perf_counter()
        stats = self.server.stats
        stats.lateness_s.append(now - at)
        stats.num_chunks += 1
        if self.pending_role:
            self.pending_role = False
            self.role(at)
        last = index == self.num_tokens - 1
        finish = '"length"' if last else "null"
        if self.chat:
            choice = f'{{"index":0,"delta":{{"content":" the"}},"finish_reason":{finish}}}'
            head = '{"object":"chat.completion.chunk","choices":['
        else:
            choice = f'{{"index":0,"text":" the","finish_reason":{finish}}}'
            head = '{"object":"text_completion","choices":['
        self._send(f'{head}{choice}],"t":{now:.6f}}}')
        if last:
            usage = {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.num_tokens,
                "total_tokens": self.prompt_tokens + self.num_tokens,
                "prompt_tokens_details": {"cached_tokens": self.cached},
            }
            self._send(json.dumps({"choices": [], "usage": usage}, separators=(",", ":")))
            self._send("[DONE]")
            self.conn.write(b"0\r\n\r\n")


class MockServerThread:
    """The mock server on its own event loop in a daemon thread (for synchronous callers)."""

    def __init__(self, timing: MockTiming | None = None, model: str = "mock") -> None:
        self.server = MockServer(timing, model)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> MockServerThread:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

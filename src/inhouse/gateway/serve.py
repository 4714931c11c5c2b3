"""Run the gateway: uvicorn (uvloop and httptools when installed), TLS, SIGTERM drain.

SIGTERM or SIGINT starts a drain: `/health` turns 503 and new requests get 503 at once (a load
balancer or `up` stops sending), requests already accepted run to their end for up to
`proxy.drain_timeout_s`, then the server stops. A second SIGINT stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Iterator

import uvicorn

from inhouse.gateway.app import GatewayApp
from inhouse.gateway.service import Gateway

log = logging.getLogger("inhouse.gateway")


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: `serve_gateway` drains first."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def uvicorn_config(
    gateway: Gateway,
    host: str,
    port: int,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> uvicorn.Config:
    http: type[asyncio.Protocol] | str = "httptools"
    try:
        from inhouse.gateway import direct
    except ImportError:  # an uvicorn that moved the internals it builds on
        direct = None  # type: ignore[assignment]
    if direct is not None and direct.is_supported():
        http = direct.GatewayProtocol
    else:
        log.warning(
            "uvicorn %s lacks what the direct chunk path needs; relaying through ASGI send "
            "(slower). Install the uvicorn version pyproject.toml names.",
            uvicorn.__version__,
        )
    return uvicorn.Config(
        GatewayApp(gateway),
        host=host,
        port=port,
        http=http,
        loop="none",
        lifespan="off",
        log_config=None,
        access_log=False,
        proxy_headers=False,  # nothing reads the client address: no middleware per request
        timeout_keep_alive=75,
        timeout_graceful_shutdown=5,
        backlog=4096,
        ssl_certfile=certfile,
        ssl_keyfile=keyfile,
    )


async def serve_gateway(
    gateway: Gateway, host: str, port: int, certfile: str | None, keyfile: str | None
) -> int:
    server = _Server(uvicorn_config(gateway, host, port, certfile, keyfile))
    loop = asyncio.get_running_loop()
    await gateway.start()
    # NOTE: what start-up built (modules, specs, tokenizer, metric families) leaves the
    # collector's generations, so a full collection scans only what requests left behind:
    # unfrozen, one took 20-40 ms mid-run, all requests on the core waiting behind it.
    gc.collect()
    gc.freeze()
    tasks: list[asyncio.Task[None]] = []

    async def shutdown() -> None:
        await gateway.drain(gateway.spec.proxy.drain_timeout_s)
        server.should_exit = True

    def on_signal(signum: int) -> None:
        if gateway.is_draining:
            if signum == signal.SIGINT:
                server.force_exit = True
                server.should_exit = True
            return
        log.info("shutdown triggered by %s", signal.Signals(signum).name)
        tasks.append(loop.create_task(shutdown()))

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    scheme = "https" if certfile else "http"
    ready = sum(r.is_healthy for p in gateway.pools.values() for r in p.replicas)
    total = sum(len(p.replicas) for p in gateway.pools.values())
    log.info(
        "inhouse gateway on %s://%s:%d (%d of %d replicas ready)", scheme, host, port, ready, total
    )
    try:
        await server.serve()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await gateway.stop()
    return 0 if server.started else 1


def run_event_loop(main: object) -> int:
    """Run a coroutine on uvloop when installed, else asyncio's loop."""
    try:
        import uvloop

        result: int = uvloop.run(main)  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover
        result = asyncio.run(main)  # type: ignore[arg-type]
    return result

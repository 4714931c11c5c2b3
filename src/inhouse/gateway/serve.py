"""Run the gateway: its HTTP server (`inhouse.http1.server`) on uvloop when installed, TLS, drain.

SIGTERM or SIGINT starts a drain: `/health` turns 503 and new requests get 503 at once (a load
balancer or `up` stops sending), requests already accepted run to their end for up to
`proxy.drain_timeout_s`, then the server stops (connections close after their response,
handlers still running `SHUTDOWN_GRACE_S` later are cancelled: a stream ends with an error
event, a request not yet answered gets 503). A second SIGINT stops at once.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time

from inhouse.gateway.app import GatewayApp, create_metrics_app
from inhouse.gateway.service import Gateway
from inhouse.http1.listener import GatewayServer, tls_context

log = logging.getLogger("inhouse.gateway")

SHUTDOWN_GRACE_S = 5.0
MAX_METRICS_CONNECTIONS = 64  # scrapers and probes
GC_CHECK_S = 1.0
GC_MAX_NEW_OBJECTS = 200_000  # tracked objects that outlived their allocation since the last run
GC_EVERY_S = 600.0


def gateway_server(
    gateway: Gateway, certfile: str | None = None, keyfile: str | None = None
) -> GatewayServer:
    """The gateway's app behind its HTTP server, not yet listening (`start`)."""
    limits = gateway.spec.server
    return GatewayServer(
        GatewayApp(gateway),
        limits.keep_alive_s,
        tls_context(certfile, keyfile),
        header_timeout_s=limits.header_timeout_s,
        max_connections=limits.max_connections,
        send_timeout_s=limits.send_timeout_s,
    )


def metrics_server(gateway: Gateway) -> GatewayServer:
    """`/metrics` and `/health` on the metrics port, not yet listening."""
    limits = gateway.spec.server
    return GatewayServer(
        create_metrics_app(gateway),
        limits.keep_alive_s,
        header_timeout_s=limits.header_timeout_s,
        max_connections=MAX_METRICS_CONNECTIONS,
        send_timeout_s=limits.send_timeout_s,
    )


async def serve_gateway(
    gateway: Gateway,
    host: str,
    port: int,
    certfile: str | None,
    keyfile: str | None,
    metrics_host: str | None = None,
    metrics_port: int | None = None,
) -> int:
    server = gateway_server(gateway, certfile, keyfile)
    scraped = metrics_server(gateway)
    loop = asyncio.get_running_loop()
    await gateway.start()
    # NOTE: what start-up built (modules, specs, tokenizer, metric families) leaves the
    # collector's generations, so a full collection scans only what requests left behind:
    # unfrozen, one took 20-40 ms mid-run, all requests on the core waiting behind it.
    gc.collect()
    gc.freeze()
    # NOTE: and the collector's own runs stop: a request leaves no reference cycles (none on
    # the error paths either; measured), so they found nothing, yet at 500 req/s they scanned
    # the in-flight requests' objects every few ms (pauses up to 5 ms) and all of them every
    # 10-15 s (40 ms). `collect_garbage` runs it when objects pile up, and every 10 minutes.
    gc.disable()
    stopped = asyncio.Event()
    forced: list[bool] = []
    tasks: list[asyncio.Task[None]] = []

    async def drain() -> None:
        await gateway.drain(gateway.spec.proxy.drain_timeout_s)
        stopped.set()

    def on_signal(signum: int) -> None:
        if gateway.is_draining:
            if signum == signal.SIGINT:
                forced.append(True)
                stopped.set()
            return
        log.info("shutdown triggered by %s", signal.Signals(signum).name)
        tasks.append(loop.create_task(drain()))

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    collector = loop.create_task(collect_garbage())
    try:
        where = metrics_host or host
        wanted = gateway.spec.metrics_port if metrics_port is None else metrics_port
        try:
            await server.start(host, port)
            await scraped.start(where, wanted)
        except OSError as exc:
            log.error("cannot listen on %s:%d or %s:%d: %s", host, port, where, wanted, exc)
            await server.shutdown(0.0)
            return 1
        scheme = "https" if certfile else "http"
        ready = sum(r.is_healthy for p in gateway.pools.values() for r in p.replicas)
        total = sum(not r.is_vacant for p in gateway.pools.values() for r in p.replicas)
        log.info(
            "inhouse gateway on %s://%s:%d, metrics on http://%s:%d/metrics "
            "(%d of %d replicas ready)",
            scheme,
            host,
            server.port,
            where,
            scraped.port,
            ready,
            total,
        )
        await stopped.wait()
        await server.shutdown(0.0 if forced else SHUTDOWN_GRACE_S)
        await scraped.shutdown(0.0)
    finally:
        collector.cancel()
        gc.enable()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await gateway.stop()
    return 0


async def collect_garbage(
    check_s: float = GC_CHECK_S,
    max_new_objects: int = GC_MAX_NEW_OBJECTS,
    every_s: float = GC_EVERY_S,
) -> None:
    """Run the cycle collector (its automatic runs off) when more than `max_new_objects`
    tracked objects have outlived their allocation since the last run, or `every_s` after it:
    whatever cycles something makes are freed within bounds, in a few pauses an hour."""
    last = time.monotonic()
    while True:
        await asyncio.sleep(check_s)
        now = time.monotonic()
        if gc.get_count()[0] <= max_new_objects and now - last < every_s:
            continue
        started = time.perf_counter()
        found = gc.collect()
        last = time.monotonic()
        log.debug(
            "garbage collection: %d unreachable objects in %.1f ms",
            found,
            1000 * (time.perf_counter() - started),
        )


def run_event_loop(main: object) -> int:
    """Run a coroutine on uvloop when installed, else asyncio's loop."""
    try:
        import uvloop

        result: int = uvloop.run(main)  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover
        result = asyncio.run(main)  # type: ignore[arg-type]
    return result

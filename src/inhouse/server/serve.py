"""Run the simulated engine: API server (and admin server), engine loop, load delay, drain.

SIGTERM or SIGINT starts a drain: /health and new generation requests answer 503 at once,
in-flight requests keep streaming until they finish or `shutdown_timeout_s` passes (then they
end with `finish_reason: "abort"`), and the process exits. A second SIGINT exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
from collections.abc import Iterator

import uvicorn

from inhouse.errors import SpecError
from inhouse.launch.engine_args import KEEP_ALIVE_ENV
from inhouse.server.admin_app import create_admin_app
from inhouse.server.engine_app import create_engine_app
from inhouse.server.state import EngineOptions, EngineState

log = logging.getLogger("inhouse.engine")

STATS_INTERVAL_S = 10.0


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: `serve_engine` drains first."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def drain(state: EngineState, timeout_s: float) -> int:
    """Refuse new work, let in-flight requests finish for up to `timeout_s`, abort the rest.
    Returns how many were aborted."""
    state.is_draining = True
    runner = state.runner
    log.info(
        "shutdown: draining %d in-flight request(s), up to %.0f s", runner.num_in_flight, timeout_s
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while runner.num_in_flight and loop.time() < deadline:
        await asyncio.sleep(0.05)
    leftover = list(runner.streams.values())
    for stream in leftover:
        runner.abort(stream)
    if leftover:
        log.warning("shutdown: aborted %d request(s) at the drain timeout", len(leftover))
        await asyncio.sleep(0.1)  # let their handlers send the abort chunk and [DONE]
    return len(leftover)


async def _load(state: EngineState) -> None:
    if state.options.knobs.load_time_s > 0:
        log.info("loading (simulated): ready in %.1f s", state.options.knobs.load_time_s)
        await asyncio.sleep(state.options.knobs.load_time_s)
    # NOTE: as vLLM does after start-up: move what start-up built out of the collector's way,
    # so full collections stay short (they would show up as steps delivered late).
    gc.collect()
    gc.freeze()
    state.mark_loaded()
    log.info(
        "engine ready: model %s, %d KV blocks",
        state.model_name,
        state.replica.config.num_gpu_blocks,
    )


async def _log_stats(state: EngineState) -> None:
    """vLLM's periodic one-line engine summary."""
    kv = state.core.scheduler.kv
    stats = state.core.stats
    last = (
        stats.num_prompt_tokens,
        stats.num_generation_tokens,
        kv.num_query_tokens,
        kv.num_hit_tokens,
    )
    while True:
        await asyncio.sleep(STATS_INTERVAL_S)
        now = (
            stats.num_prompt_tokens,
            stats.num_generation_tokens,
            kv.num_query_tokens,
            kv.num_hit_tokens,
        )
        if now == last and not state.runner.num_in_flight:
            continue
        queries = now[2] - last[2]
        hit_rate = 100.0 * (now[3] - last[3]) / queries if queries else 0.0
        log.info(
            "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f "
            "tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix "
            "cache hit rate: %.1f%%",
            (now[0] - last[0]) / STATS_INTERVAL_S,
            (now[1] - last[1]) / STATS_INTERVAL_S,
            state.core.num_running,
            state.core.num_waiting,
            100.0 * state.core.kv_usage,
            hit_rate,
        )
        last = now


def _config(app: object, host: str, port: int, sock: socket.socket | None) -> uvicorn.Config:
    return uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=keep_alive_s(),
    )


def keep_alive_s() -> int:
    """Idle HTTP connections are closed after this many seconds: vLLM's
    `VLLM_HTTP_TIMEOUT_KEEP_ALIVE`, 5 unless set (`inhouse up` sets it for its replicas)."""
    value = os.environ.get(KEEP_ALIVE_ENV, "5")
    try:
        return max(1, int(value))
    except ValueError:
        raise SpecError(
            f"{KEEP_ALIVE_ENV}={value!r} is not a whole number of seconds; unset it or give "
            "one, e.g. 75"
        ) from None


async def serve_engine(
    options: EngineOptions,
    host: str,
    port: int,
    admin_host: str = "127.0.0.1",
    admin_port: int | None = None,
    access_log: bool = False,
) -> int:
    state = EngineState.build(options)
    config = _config(create_engine_app(state), host, port, None)
    config.access_log = access_log
    server = _Server(config)
    servers = [server]
    if admin_port is not None:
        admin = _Server(_config(create_admin_app(state), admin_host, admin_port, None))
        servers.append(admin)
        log.info("admin (fault injection) on http://%s:%d/faults", admin_host, admin_port)
    loop = asyncio.get_running_loop()
    tasks = [
        loop.create_task(state.runner.run()),
        loop.create_task(_load(state)),
        loop.create_task(_log_stats(state)),
    ]

    async def shutdown() -> None:
        await drain(state, options.knobs.shutdown_timeout_s)
        for s in servers:
            s.should_exit = True

    def on_signal(signum: int) -> None:
        if state.is_draining:
            if signum == signal.SIGINT:
                for s in servers:
                    s.force_exit = True
                    s.should_exit = True
            return
        log.info("shutdown triggered by %s", signal.Signals(signum).name)
        tasks.append(loop.create_task(shutdown()))

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    log.info(
        "inhouse engine (simulated %s on %s x%d) on http://%s:%d",
        state.replica.model.name,
        state.replica.gpu.name,
        options.tp,
        host,
        port,
    )
    try:
        await asyncio.gather(*(s.serve() for s in servers))
    finally:
        state.runner.stop()
        for task in tasks:
            task.cancel()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    return 0 if all(s.started for s in servers) else 1

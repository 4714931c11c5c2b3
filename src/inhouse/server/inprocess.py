"""A simulated engine inside the caller's event loop, for tests and in-process tools.

    async with inprocess_engine(EngineOptions(model="meta-llama/Llama-3.1-8B-Instruct")) as eng:
        response = await eng.client.post("/v1/completions", json={...})

The client talks to the ASGI app through `httpx.ASGITransport` (no socket); the engine loop
runs as a task of the same loop. `eng.state` exposes the engine for assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

from inhouse.server.admin_app import create_admin_app
from inhouse.server.engine_app import create_engine_app
from inhouse.server.state import EngineOptions, EngineState


@dataclass
class InProcessEngine:
    state: EngineState
    client: httpx.AsyncClient
    admin: httpx.AsyncClient


@contextlib.asynccontextmanager
async def inprocess_engine(
    options: EngineOptions, loaded: bool = True
) -> AsyncIterator[InProcessEngine]:
    state = EngineState.build(options)
    if loaded:
        state.mark_loaded()
    task = asyncio.create_task(state.runner.run())
    api = httpx.ASGITransport(app=create_engine_app(state))
    admin = httpx.ASGITransport(app=create_admin_app(state))
    try:
        async with (
            httpx.AsyncClient(transport=api, base_url="http://engine") as client,
            httpx.AsyncClient(transport=admin, base_url="http://admin") as admin_client,
        ):
            yield InProcessEngine(state, client, admin_client)
    finally:
        state.runner.stop()
        await task

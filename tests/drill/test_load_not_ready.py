"""load-not-ready's clock: when the loading replica turned ready."""

from __future__ import annotations

import asyncio
import time

import pytest

from inhouse.drill.drills import load_not_ready


def test_ready_is_when_the_replica_turned_healthy_not_when_the_drill_saw_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under load the drill's own /health probe sees 200 late, and the gateway, probing on its
    own, rightly routes to the replica before that: counted against the probe's time (less
    0.3 s), such a request was "routed while loading", a false failure. kill-replica already
    reads the replica's own clock (its fault port's /loaded); load-not-ready now does too."""
    turned_healthy = time.perf_counter() - 1.5  # the probe saw it 1.5 s late
    answers = iter([503, 503, 200])

    async def health_code(url: str) -> int:
        return next(answers)

    async def engine_value(url: str, name: str) -> float:
        return 0.0

    async def loaded_at(admin_url: str) -> float:
        assert admin_url == "http://admin"
        return turned_healthy

    monkeypatch.setattr(load_not_ready, "health_code", health_code)
    monkeypatch.setattr(load_not_ready, "engine_value", engine_value)
    monkeypatch.setattr(load_not_ready, "loaded_at", loaded_at)
    ready, seen = asyncio.run(load_not_ready._watch_loading("http://engine", "http://admin", 10.0))
    assert ready == turned_healthy and seen == 0.0

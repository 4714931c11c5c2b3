"""The drill's probes: when a simulated engine turned /health 200 comes from the engine itself,
so a drill whose event loop is late (under load) does not date the replica's readiness late."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable

from inhouse.drill.probes import loaded_at, wait_healthy
from inhouse.server.inprocess import inprocess_engine
from inhouse.server.state import EngineOptions

ENGINE = [sys.executable, "-m", "inhouse.cli.engine"]


def test_a_replica_dates_its_readiness_itself_not_when_the_drill_looked(
    free_port: Callable[[], int],
) -> None:
    port, admin = free_port(), free_port()
    load_s = 1.0
    started = time.perf_counter()
    process = subprocess.Popen(
        [*ENGINE, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "tiny",
         "--max-model-len", "1024", "--load-time-s", str(load_s), "--port", str(port),
         "--admin-port", str(admin)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    async def main() -> tuple[float | None, float | None]:
        seen = await wait_healthy(f"http://127.0.0.1:{port}", 60.0, poll_s=0.02)
        await asyncio.sleep(1.0)  # a drill that looks late
        return seen, await loaded_at(f"http://127.0.0.1:{admin}")

    try:
        seen, at = asyncio.run(main())
    finally:
        process.terminate()
        process.wait(30)
    assert seen is not None and at is not None
    assert started + load_s <= at <= seen  # after its model load, before anyone saw the 200


def test_a_loading_replica_says_it_has_not_turned_ready(
    make_options: Callable[..., EngineOptions],
) -> None:
    async def main() -> None:
        async with inprocess_engine(make_options(), loaded=False) as engine:
            reply = (await engine.admin.get("/loaded")).json()
            assert reply == {"loaded": False, "loaded_at_monotonic": None}
            assert (await engine.client.get("/health")).status_code == 503
            before = time.monotonic()
            engine.state.mark_loaded()
            reply = (await engine.admin.get("/loaded")).json()
            assert reply["loaded"] and before <= reply["loaded_at_monotonic"] <= time.monotonic()
            assert (await engine.client.get("/health")).status_code == 200

    asyncio.run(main())


def test_a_replica_that_does_not_answer_says_nothing() -> None:
    assert asyncio.run(loaded_at("http://127.0.0.1:9")) is None

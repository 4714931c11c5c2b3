"""Engines `inhouse up` attaches to (`url` and `sglang` pools): it starts nothing for them, but
calls the stack ready only once each answers, as it does for its own children.

An attached engine is ready when `GET URL/health` answers 200 (vLLM, SGLang and `inhouse engine`
all serve it; 503 while a model loads). A server with no `/health` (404) may answer
`GET URL/v1/models` with 200 instead. The probe goes as the gateway's own requests go (TLS
verified, the environment's proxies), so a URL the gateway cannot reach is not called ready.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import httpx

PROBE_TIMEOUT_S = 2.0


def probe_engine(client: httpx.Client, url: str) -> str | None:
    """None when the engine at `url` answers ready; else what it did instead."""
    try:
        response = client.get(f"{url}/health")
        if response.status_code == 404:
            models = client.get(f"{url}/v1/models")
            if models.status_code == 200:
                return None
            return f"no /health, and /v1/models answered HTTP {models.status_code}"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if response.status_code == 200:
        return None
    return f"/health answered HTTP {response.status_code}"


def wait_attached(
    pool_urls: Mapping[str, Sequence[str]],
    timeout_s: float,
    started: float | None = None,
    poll_s: float = 0.5,
) -> list[str]:
    """Wait until every attached engine answers ready, at most until `started + timeout_s`
    (monotonic; `started` defaults to now), each probed at least once. Returns a problem per
    engine that did not answer, naming its pool and URL; empty when all are ready."""
    deadline = (time.monotonic() if started is None else started) + timeout_s
    pending = [(pool, url) for pool, urls in pool_urls.items() for url in urls]
    seen: dict[tuple[str, str], str] = {}
    with httpx.Client(timeout=PROBE_TIMEOUT_S) as client:
        while pending:
            for engine in list(pending):
                answer = probe_engine(client, engine[1])
                if answer is None:
                    pending.remove(engine)
                else:
                    seen[engine] = answer
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(poll_s)
    return [
        f"pool {pool}: the attached engine at {url} did not answer ready within --ready-timeout "
        f"{timeout_s:g} s (last: {seen[(pool, url)]}); start it, or correct the pool's `urls` "
        "in the stack file"
        for pool, url in pending
    ]

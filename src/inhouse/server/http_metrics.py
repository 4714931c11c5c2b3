"""The HTTP series vLLM's API server exposes beside its engine metrics (from
prometheus-fastapi-instrumentator): requests by handler, method and status class, and their
durations. Health, metrics and other probe routes are not counted, as in vLLM 0.33."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

EXCLUDED = frozenset({"/metrics", "/health", "/load", "/ping", "/version", "/server_info"})
HIGHR_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    2.5,
    3.0,
    3.5,
    4.0,
    4.5,
    5.0,
    7.5,
    10.0,
    30.0,
    60.0,
)


class HttpMetricsMiddleware:
    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter(
            "http_requests",
            "Total number of requests by method, status and handler.",
            ("handler", "method", "status"),
            registry=registry,
        )
        self.duration = Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by "
            "handler is important.",
            ("handler", "method"),
            buckets=(0.1, 0.5, 1.0),
            registry=registry,
        )
        self.duration_highr = Histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate "
            "percentile calculations.",
            buckets=HIGHR_BUCKETS,
            registry=registry,
        )

    def _handler(self, scope: Scope) -> str:
        router = getattr(scope.get("app"), "router", None)
        for route in getattr(router, "routes", ()):
            match, _ = route.matches(scope)
            if match is not Match.NONE:
                return str(getattr(route, "path", "none"))
        return "none"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXCLUDED:
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            handler = self._handler(scope)
            method = scope["method"]
            elapsed = time.perf_counter() - start
            self.requests.labels(handler, method, f"{status[0] // 100}xx").inc()
            self.duration.labels(handler, method).observe(elapsed)
            self.duration_highr.observe(elapsed)

"""The gateway's ASGI apps: on the API port the two generation routes (raw ASGI,
`proxy.GenerationRoute`) and the small ones — `/v1/models`, `/health`, `/openapi.json` — on
Starlette; on the metrics port (`gateway.metrics_port`) `/metrics` and `/health`. `/metrics`
names tenants and their token counts, so it is never on the port clients reach. Unknown
routes and methods answer in OpenAI's error shape too."""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from inhouse.gateway.errors import GatewayError
from inhouse.gateway.metrics import CONTENT_TYPE
from inhouse.gateway.openapi import openapi_document
from inhouse.gateway.proxy import GenerationRoute
from inhouse.gateway.service import Gateway
from inhouse.http1.errors import error_json


def _json(body: dict[str, Any], status: int = 200) -> Response:
    data = json.dumps(body, separators=(",", ":")).encode()
    return Response(data, status_code=status, media_type="application/json")


def _error(error: GatewayError) -> Response:
    headers = {k.decode(): v.decode() for k, v in error.headers()}
    return Response(error.body(), status_code=error.status, headers=headers)


def create_app(gateway: Gateway) -> Starlette:
    openapi = json.dumps(openapi_document(f"inhouse gateway ({gateway.stack.name})")).encode()

    async def models(request: Request) -> Response:
        try:
            tenant = gateway.tenants.authenticate(request.headers.get("authorization"))
        except GatewayError as error:
            gateway.metrics.rejections.child("", error.reason).inc()
            return _error(error)
        created = int(time.time())
        data = []
        for pool in gateway.stack.pools:
            max_len = gateway.pools[pool.name].max_model_len()
            for name in pool.model_names:
                if tenant.may_use(name):
                    data.append(
                        {
                            "id": name,
                            "object": "model",
                            "created": created,
                            "owned_by": "inhouse",
                            "root": pool.model,
                            "parent": None,
                            "max_model_len": max_len,
                        }
                    )
        return _json({"object": "list", "data": data})

    health = _health(gateway)

    async def openapi_json(request: Request) -> Response:
        return Response(openapi, media_type="application/json")

    routes = [
        Route(
            "/v1/chat/completions",
            GenerationRoute(gateway, "/v1/chat/completions", True),
            methods=["POST"],
        ),
        Route(
            "/v1/completions", GenerationRoute(gateway, "/v1/completions", False), methods=["POST"]
        ),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/openapi.json", openapi_json, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    app.state.gateway = gateway
    return app


def create_metrics_app(gateway: Gateway) -> Starlette:
    """What the metrics port serves: `/metrics` for Prometheus, `/health` for probes."""

    async def metrics(request: Request) -> Response:
        return Response(gateway.metrics.render(), media_type=CONTENT_TYPE)

    routes = [
        Route("/metrics", metrics, methods=["GET"]),
        Route("/health", _health(gateway), methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: _http_error})


def _health(gateway: Gateway) -> Any:
    async def health(request: Request) -> Response:
        if gateway.is_ready:
            return _json({"status": "ok"})
        status = "draining" if gateway.is_draining else "no replica ready"
        return _json({"status": status}, 503)

    return health


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    message = "Not Found" if status == 404 else str(getattr(exc, "detail", "error"))
    body = error_json(message, "NotFoundError" if status == 404 else "Bad Request", None, status)
    return Response(body, status_code=status, media_type="application/json")


class GatewayApp:
    """The ASGI entry point: POSTs to the two generation routes go straight to their handler
    (no routing table or middleware wrapping each streamed `send`); the rest to Starlette."""

    def __init__(self, gateway: Gateway) -> None:
        self.starlette = create_app(gateway)
        self.fast = {
            "/v1/chat/completions": GenerationRoute(gateway, "/v1/chat/completions", True),
            "/v1/completions": GenerationRoute(gateway, "/v1/completions", False),
        }
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            route = self.fast.get(scope["path"])
            if route is not None:
                await route(scope, receive, send)
                return
        await self.starlette(scope, receive, send)

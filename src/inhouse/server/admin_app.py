"""Fault injection for drills, on a separate admin port that `inhouse engine` opens only when
given `--admin-port` (bound to 127.0.0.1 unless `--admin-host` says otherwise).

    GET  /faults                      current switches
    GET  /loaded                      {"loaded": true, "loaded_at_monotonic": 12.3}: when /health
                                      first turned 200, on this host's monotonic clock
    POST /faults/slow     {"factor": 3.0}            every step takes factor x longer (1 = off)
    POST /faults/fail     {"count": 5, "status": 500} the next N generation requests fail
    POST /faults/hang     {"scope": "engine"|"all"}   stop stepping; `all` also stalls every
                                                      request on the API port, /health included
    POST /faults/fill_kv  {"fraction": 1.0}           hold KV blocks until that fraction is used
    POST /faults/exit     {"code": 137}               exit abruptly (no drain), just after replying
    POST /faults/clear                                undo slow, fail, hang and fill_kv
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
from http import HTTPStatus
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from inhouse.server.state import EngineState

log = logging.getLogger("inhouse.engine")

ERROR_STATUSES = frozenset(s.value for s in HTTPStatus if 400 <= s.value <= 599)


def _state(request: Request) -> EngineState:
    engine: EngineState = request.app.state.engine
    return engine


async def _json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("the body must be a JSON object")
    return data


def describe(state: EngineState) -> dict[str, Any]:
    runner = state.runner
    return {
        "slow_factor": runner.slow_factor,
        "fail_next": state.faults.fail_next,
        "fail_status": state.faults.fail_status,
        "hang": "all"
        if not state.faults.hang_all.is_set()
        else ("engine" if runner.is_hung else None),
        "kv_usage": round(state.core.kv_usage, 4),
    }


def _bad(message: str) -> Response:
    return JSONResponse({"error": message}, status_code=400)


async def get_faults(request: Request) -> Response:
    return JSONResponse(describe(_state(request)))


async def get_loaded(request: Request) -> Response:
    state = _state(request)
    return JSONResponse({"loaded": state.is_loaded, "loaded_at_monotonic": state.loaded_at})


async def post_fault(request: Request) -> Response:
    state = _state(request)
    name = request.path_params["name"]
    try:
        body = await _json(request)
        if name == "slow":
            factor = float(body.get("factor", 1.0))
            if not (math.isfinite(factor) and factor > 0):  # NaN or inf would wedge the loop
                return _bad(f"factor must be a finite number above 0, got {factor}")
            state.runner.slow_factor = factor
        elif name == "fail":
            count, status = body.get("count", 1), body.get("status", 500)
            if type(count) is not int or count < 0:  # not bool, not 1.5
                return _bad(f"count must be a whole number of requests, 0 or more, got {count!r}")
            if type(status) is not int or status not in ERROR_STATUSES:  # its body's words
                return _bad(
                    f"status must be a standard HTTP error status (4xx or 5xx), got {status!r}"
                )
            state.faults.fail_next = count
            state.faults.fail_status = status
        elif name == "hang":
            scope = body.get("scope", "engine")
            if scope not in ("engine", "all"):
                return _bad("scope is engine or all")
            state.runner.set_hang(True)
            if scope == "all":
                state.faults.hang_all.clear()
        elif name == "fill_kv":
            fraction = float(body.get("fraction", 1.0))
            if not 0.0 <= fraction <= 1.0:
                return _bad("fraction is between 0 and 1")
            state.runner.fill_kv(fraction)
        elif name == "exit":
            code = body.get("code", 137)
            if type(code) is not int or not 0 <= code <= 255:  # 256 would exit 0: "clean"
                return _bad(f"code must be a process exit status, 0 to 255, got {code!r}")
            log.warning("fault injection: exiting abruptly with code %d", code)
            asyncio.get_running_loop().call_later(0.05, os._exit, code)
        elif name == "clear":
            clear_faults(state)
        else:
            return JSONResponse({"error": f"unknown fault {name!r}"}, status_code=404)
    except (ValueError, TypeError) as exc:
        return _bad(str(exc))
    log.warning("fault injection: %s %s", name, body)
    return JSONResponse(describe(state))


def clear_faults(state: EngineState) -> None:
    state.runner.slow_factor = 1.0
    state.faults.fail_next = 0
    state.runner.set_hang(False)
    state.faults.hang_all.set()
    state.runner.release_kv()


def create_admin_app(state: EngineState) -> Starlette:
    app = Starlette(
        routes=[
            Route("/faults", get_faults, methods=["GET"]),
            Route("/loaded", get_loaded, methods=["GET"]),
            Route("/faults/{name}", post_fault, methods=["POST"]),
        ]
    )
    app.state.engine = state
    return app

"""A direct write path for streamed bodies, offered by the gateway's own uvicorn protocol.

Through ASGI, every SSE chunk the engine sends costs the gateway a future, a task switch, a
message dict and uvicorn's `send` coroutine. `GatewayProtocol` is uvicorn's httptools protocol
with one `ChunkWriter` (`chunk_writer.py`) per connection, put in every request's
`scope["extensions"]`; the
generation routes write the engine's chunks with it straight from the upstream connection's
`data_received`, in HTTP/1.1 chunked framing. The response head and the stream's end still go
through ASGI `send`, so uvicorn keeps its keep-alive, disconnect and drain bookkeeping. Any other
ASGI server (and `httpx.ASGITransport` in the tests) offers no writer, and the routes relay
through `send` as before.

NOTE: this leans on uvicorn internals: `self.scope`, `self.cycle`, the cycle's `transport`
attribute (which uvicorn only writes, closes and asks `is_closing`), and — only when a stream
fails before its first token and no other replica can stream it — the cycle's
`response_started`, `chunked_encoding` and `expected_content_length`, reset so that the error
goes out with its own status (checked when used; without them the stream ends with an error
event instead);
tests/gateway/test_direct.py runs the real server, so an uvicorn that changes them fails there,
and `is_supported` checks their shape at start-up: where it does not match, or this module
cannot even be imported, the gateway serves with uvicorn's own protocol and relays through
`send` (slower, same behaviour). Nothing else imports this module.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from inhouse.gateway.chunk_writer import EXTENSION, ChunkWriter
from inhouse.gateway.eager import start_eagerly

# POSTs to these paths start their handler with the whole body, eagerly (`on_message_complete`).
EAGER_PATHS = frozenset(("/v1/chat/completions", "/v1/completions"))


def is_supported() -> bool:
    """Whether this uvicorn has the internals `GatewayProtocol` leans on (see NOTE)."""
    try:
        cycle_params = inspect.signature(RequestResponseCycle.__init__).parameters
        flow_has_state = hasattr(FlowControl(None), "write_paused")  # type: ignore[arg-type]
    except Exception:
        return False
    # NOTE: `_start_asgi_task` (the eager start's hook) is not required: an uvicorn without it
    # never calls the override, nothing is deferred, and requests start the ordinary way.
    hooks = (
        "connection_made",
        "connection_lost",
        "on_message_begin",
        "on_headers_complete",
        "on_body",
        "on_message_complete",
    )
    return (
        "transport" in cycle_params
        and "flow" in cycle_params
        and callable(getattr(RequestResponseCycle, "run_asgi", None))
        and all(callable(getattr(HttpToolsProtocol, name, None)) for name in hooks)
        and callable(getattr(FlowControl, "drain", None))
        and flow_has_state
    )


class GatewayProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a `ChunkWriter` in every request's scope."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deferred: tuple[RequestResponseCycle, Any] | None = None
        self._writer = ChunkWriter(transport, self.flow)
        self._writer.on_unstart = self._unstart

    def connection_lost(self, exc: Exception | None) -> None:
        self._deferred = None  # its body never came: nothing was accepted
        super().connection_lost(exc)
        self._writer.connection_lost()

    def on_message_begin(self) -> None:
        # A response the eager start completed inside this read armed uvicorn's keep-alive
        # timer (`on_response_complete`), which only the next read would disarm; a request
        # pipelined in this same read must not be cut off by it.
        unset = getattr(self, "_unset_keepalive_if_required", None)
        if unset is not None:
            unset()
        super().on_message_begin()
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
        extensions[EXTENSION] = self._writer

    def _unstart(self) -> bool:
        """The current cycle's response has not started after all (its head was held back by
        the writer and never written): uvicorn's three fields for it, back to their start."""
        cycle = self.cycle
        fields = ("response_started", "chunked_encoding", "expected_content_length")
        if cycle is None or cycle.response_complete or not all(hasattr(cycle, f) for f in fields):
            return False
        cycle.response_started = False
        cycle.chunked_encoding = None
        cycle.expected_content_length = 0
        return True

    def on_headers_complete(self) -> None:
        self._deferred = None
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:
            cycle.transport = self._writer  # type: ignore[assignment]  # duck-typed: see NOTE

    # -- eager start of the generation routes ----------------------------------------------
    # uvicorn starts a request's task when its headers are parsed; the task's first step runs
    # on a later turn of the loop, after every other callback due in this one, and then waits
    # for the body. A POST to a generation route is started instead when its body is complete,
    # eagerly (`eager.start_eagerly`): its handler runs from this callback up to its first
    # wait, so the request is written to the engine without a turn of the loop in between.

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        if self.transport.is_closing():
            # A response completed inside this read closed the connection (uvicorn's 500 says
            # `connection: close`): a request pipelined behind it is dropped, as uvicorn does.
            return
        scope = cycle.scope
        if (
            getattr(cycle, "more_body", False) is True
            and getattr(cycle, "waiting_for_100_continue", True) is False
            and scope["method"] == "POST"
            and scope.get("path") in EAGER_PATHS
        ):
            self._deferred = (cycle, app)  # started by on_message_complete, or on_body
            return
        super()._start_asgi_task(cycle, app)

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        deferred = self._deferred
        if deferred is not None and self.flow.read_paused:
            # A body too big to wait for: uvicorn paused reading until the app reads it.
            self._deferred = None
            super()._start_asgi_task(*deferred)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        deferred = self._deferred
        if deferred is None:
            return
        self._deferred = None
        if self.transport.is_closing():
            return  # see _start_asgi_task
        cycle, app = deferred
        reset = getattr(self.config, "reset_contextvars", False)
        context = contextvars.Context() if reset else None
        task = start_eagerly(self.loop, cycle.run_asgi(app), context)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

"""Relaying an engine's 200 stream to the client (`relay_stream`), for the generation routes.

With the gateway's own server the head is held until the first token and both go out in one
write, from the engine connection's callback (`_relay_direct`); a failure before the first
token is retried on another replica unseen (the route's `dispatch`). Under any other ASGI
server chunks go out through `send` (`_relay_through_send`). After the first token, a failure
ends the stream with an error event. A client that leaves is not handled here: its request's
task is cancelled (`client_watch`), which ends the relay wherever it waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.types import Send

from inhouse.gateway.errors import GatewayError
from inhouse.gateway.relay import (
    EVENT_MARK,
    USAGE_MARK,
    StreamState,
    error_event,
    flush,
    relay_piece,
)
from inhouse.http1.chunk_writer import ChunkWriter
from inhouse.http1.upstream import Response, UpstreamError

if TYPE_CHECKING:
    from inhouse.gateway.proxy import GenerationRoute, Outcome
    from inhouse.gateway.service import Admission

SSE_TYPE = b"text/event-stream; charset=utf-8"
log = logging.getLogger("inhouse.gateway")


async def relay_stream(
    route: GenerationRoute,
    admission: Admission,
    response: Response,
    first: bytes | None,
    send: Send,
    headers: list[tuple[bytes, bytes]],
    outcome: Outcome,
    writer: ChunkWriter | None,
) -> tuple[Response, bytes | None] | None:
    """Relay a 200 stream. Returns None when the response is over, or the engine response
    to answer with instead (not a stream) when a failure before the first token led to a
    retry that got one."""
    gateway = route.gateway
    outcome.status = 200
    outcome.phase = "stream"
    state = StreamState(admission.parsed.wants_usage)
    held: list[bytes] = []  # what came before the first token (the chat role chunk)
    # With the direct writer the head is held until the first token (one write for both).
    head = [(b"content-type", SSE_TYPE), (b"cache-control", b"no-cache"), *headers,
            route.overhead_header(admission, outcome)]  # fmt: skip

    def take(piece: bytes) -> bytes:
        if (
            outcome.is_served  # the first token went out: nothing is held any more
            and not state.carry
            and piece.endswith(b"\n\n")
            and USAGE_MARK not in piece
        ):
            state.num_events += piece.count(EVENT_MARK)
            return piece  # whole events, no usage chunk: what relay_piece would return
        out = relay_piece(state, piece)
        if not state.has_first_token:  # nothing to the client yet: a failure is retried
            if out:
                held.append(out)
            return b""
        if held:
            out = b"".join(held) + out
            held.clear()
        if out and not outcome.is_served:
            placement = outcome.placement
            assert placement is not None
            outcome.is_served = True
            outcome.first_token_s = time.perf_counter()
            placement.replica.num_failures = 0
            gateway.dispatcher.first_token(placement)
        return out

    try:
        await send({"type": "http.response.start", "status": 200, "headers": head})
        while True:
            assert outcome.placement is not None
            outcome.replica = outcome.placement.replica.label
            try:
                if writer is None:
                    tail = await _relay_through_send(take, response, first, send)
                else:
                    tail = await _relay_direct(take, response, first, writer)
                break
            except UpstreamError as exc:
                if writer is None or writer.is_lost or state.has_first_token:
                    raise
                # Before the first token the client has seen nothing (its head is held):
                # the next replica, as a failure before the first byte would be.
                response.abort()
                route.failed(admission, outcome, exc)
                try:
                    response, first = await route.dispatch(admission, outcome, True)
                except GatewayError as error:
                    if writer.unstart():
                        raise
                    raise UpstreamError(error.message, False) from None
                if response.status != 200:
                    if writer.unstart():
                        return response, first  # answered whole by the caller
                    raise UpstreamError(f"engine answered {response.status}", False) from None
                state = StreamState(admission.parsed.wants_usage)
                held.clear()
        tail = b"".join(held) + tail + flush(state)
        response.release()
        await send({"type": "http.response.body", "body": tail, "more_body": False})
    except UpstreamError as exc:
        if writer is not None and writer.is_lost:
            outcome.status = 499
            outcome.reason = "client_disconnect"
        else:
            outcome.reason = "stream_error"
            gateway.metrics.stream_errors.child(admission.pool.name, outcome.replica).inc()
            message = f"The engine stream broke off: {exc}"
            await send(
                {"type": "http.response.body", "body": error_event(message), "more_body": False}
            )
    except GatewayError:
        raise  # no replica answered before the first token: the caller answers with it
    except Exception:
        # A failure of the gateway's own, mid-stream: the client still gets an error
        # event it can act on, the log gets the trace (never the prompt).
        log.exception("relaying request %s failed", admission.request_id)
        outcome.reason = "gateway_error"
        message = "The gateway failed while relaying this stream; please retry."
        with contextlib.suppress(Exception):
            await send(
                {"type": "http.response.body", "body": error_event(message), "more_body": False}
            )
    finally:
        if writer is not None:
            writer.flush()
        outcome.usage = state.usage
        outcome.num_events = state.num_events
    return None


async def _relay_through_send(
    take: Callable[[bytes], bytes], response: Response, first: bytes | None, send: Send
) -> bytes:
    """Relay the engine's pieces as ASGI messages; returns the last (sent with the end)."""
    piece = first
    while piece is not None:
        out = take(piece)
        if response.is_complete:
            return out  # the engine's last bytes go out with the end of the stream
        if out:
            await send({"type": "http.response.body", "body": out, "more_body": True})
        piece = await response.read()
    return b""


async def _relay_direct(
    take: Callable[[bytes], bytes], response: Response, first: bytes | None, writer: ChunkWriter
) -> bytes:
    """Relay from the upstream connection's callback straight to the client's transport;
    returns the last piece. A full client buffer pauses reading the engine until it drains."""
    resumes: list[asyncio.Future[None]] = []

    def resume(waiting: asyncio.Future[None]) -> None:
        resumes.clear()
        if not waiting.cancelled():  # cancelled: the relay is over, the connection let go
            response.resume_reading()

    def sink(piece: bytes) -> None:
        out = take(piece)
        if out and not writer.write_chunk(out) and not resumes:
            response.pause_reading()
            resumes.append(asyncio.ensure_future(writer.wait_writable()))
            resumes[0].add_done_callback(resume)

    if first is None:
        return b""
    if response.is_complete:
        return take(first)
    sink(first)
    try:
        last = await response.relay(sink)
    finally:
        for waiting in resumes:
            waiting.cancel()
    return take(last) if last else b""

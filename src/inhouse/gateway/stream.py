"""Relaying an engine's 200 stream to the client (`relay_stream`), for the generation routes.

One relay for every server: the engine connection's callback hands each piece to a writer,
the gateway's own server's `ChunkWriter` (straight to the client's transport) or, under any
other ASGI server, a `SendWriter` around ASGI `send`. The head is held until the first token
and both go out together. A failure before the first token takes the head back and returns
`Broke` (the route tries another replica, the client saw nothing); after it, a failure ends
the stream with an error event. A client that leaves cancels the request's task
(`client_watch`), which ends the relay wherever it waits; that is an `Ending` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from starlette.types import Send

from inhouse.gateway.admission import Admission
from inhouse.gateway.attempt import Attempt, Failed, Parts
from inhouse.gateway.client_watch import ClientWatch
from inhouse.gateway.observation import Ending
from inhouse.gateway.relay import (
    EVENT_MARK,
    FINISH_MARK,
    USAGE_MARK,
    StreamState,
    flush,
    hold_finish,
    relay_piece,
    release_held,
)
from inhouse.http1.upstream import Response, UpstreamError
from inhouse.openai_errors import error_event

SSE_TYPE = b"text/event-stream; charset=utf-8"
SHUTDOWN_MESSAGE = "The gateway is shutting down and cut this request; retry it on another one."
NO_DONE_MESSAGE = "the engine's event stream ended without data: [DONE]"
DONE_MARK = b"data: [DONE]"
log = logging.getLogger("inhouse.gateway")


class Writer(Protocol):
    """What the relay writes through (`ChunkWriter`, `SendWriter`)."""

    is_lost: bool

    def write_chunk(self, data: bytes) -> bool: ...

    async def wait_writable(self) -> None: ...

    def unstart(self) -> bool: ...

    def flush(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Broke:
    """The stream failed before its first token; its head was taken back unseen."""

    failed: Failed


async def relay_stream(
    parts: Parts,
    admission: Admission,
    attempt: Attempt,
    send: Send,
    writer: Writer,
    headers: list[tuple[bytes, bytes]],
    state: StreamState,
    watch: ClientWatch,
) -> Ending | Broke:
    """Relay a 200 stream; how it ended, or `Broke` to try it elsewhere."""
    placement, response = attempt.placement, attempt.response
    replica = placement.replica.label
    held: list[bytes] = []  # what came before the first token (the chat role chunk)
    first_token_s = 0.0
    last = b""  # the last bytes sent: does the stream end in [DONE]?

    def take(piece: bytes) -> bytes:
        nonlocal first_token_s, last
        if (
            first_token_s  # the first token went out: nothing is held any more
            and not state.carry
            and piece.endswith(b"\n\n")
            and USAGE_MARK not in piece
        ):
            if not state.held and (state.wants_usage or FINISH_MARK not in piece):
                state.num_events += piece.count(EVENT_MARK)
                last = piece
                return piece  # whole events, no usage or finish chunk: what relay_piece returns
            if hold_finish(state, piece):
                return b""  # one finish chunk, held for the usage chunk's fingerprint
        out = relay_piece(state, piece)
        if not state.has_first_token:  # nothing to the client yet: a failure is retried
            if out:
                held.append(out)
            return b""
        if held:
            out = b"".join(held) + out
            held.clear()
        if out and not first_token_s:
            first_token_s = time.perf_counter()
            parts.backends.first_token(placement)
        if out:
            last = out
        return out

    def ending(status: int, reason: str = "", is_client_gone: bool = False) -> Ending:
        return Ending(status, reason, replica, placement.reason_label, attempt.tries.num_failed,
                      state.usage, state.num_events, first_token_s, first_token_s != 0.0,
                      is_client_gone, True, "stream")  # fmt: skip

    head = [(b"content-type", SSE_TYPE), (b"cache-control", b"no-cache"), *headers,
            attempt.overhead_header(admission.arrival_s)]  # fmt: skip
    is_broken = False
    unsent = b""
    try:
        await send({"type": "http.response.start", "status": 200, "headers": head})
        try:
            tail = await _relay(take, response, attempt.first, writer)
        except UpstreamError as exc:
            if writer.is_lost or state.has_first_token or not writer.unstart():
                raise
            # Before the first token the client has seen nothing: the next replica, as a
            # failure before the first byte would be.
            is_broken = True
            response.abort()
            return Broke(Failed(placement, exc))
        tail = b"".join(held) + tail + flush(state)
        if not (tail or last).rstrip(b"\n").endswith(DONE_MARK):
            # The body ended, but not the stream: cut short upstream of the gateway (a proxy,
            # an engine that failed its own way). Before the first token it is a failure of
            # the replica, as a broken connection is; after it, the error event.
            if not state.has_first_token and not writer.is_lost and writer.unstart():
                is_broken = True
                response.abort()
                return Broke(Failed(placement, UpstreamError(NO_DONE_MESSAGE, False)))
            unsent = tail  # the last tokens go out before the error event
            raise UpstreamError(f"{NO_DONE_MESSAGE}; the answer may be incomplete", False)
        response.release()
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        return ending(200)
    except UpstreamError as exc:
        if writer.is_lost:
            return ending(499, "client_disconnect")
        parts.metrics.stream_errors.child(admission.pool.name, replica).inc()
        message = f"The engine stream broke off: {exc}"
        body = unsent + release_held(state) + error_event(message)  # what came before first
        await send({"type": "http.response.body", "body": body, "more_body": False})
        return ending(200, "stream_error")
    except asyncio.CancelledError:
        if watch.absorb():
            return ending(499, "client_disconnect", is_client_gone=True)
        # Cancelled by someone else: the server's shutdown, past the drain. The stream ends
        # with an error event the client can act on (not a cut chunked body); then on.
        with contextlib.suppress(Exception):
            body = error_event(SHUTDOWN_MESSAGE, 503)
            await send({"type": "http.response.body", "body": body, "more_body": False})
        raise
    except Exception:
        # A failure of the gateway's own, mid-stream: the client still gets an error
        # event it can act on, the log gets the trace (never the prompt).
        log.exception("relaying request %s failed", admission.request_id)
        message = "The gateway failed while relaying this stream; please retry."
        with contextlib.suppress(Exception):
            await send(
                {"type": "http.response.body", "body": error_event(message), "more_body": False}
            )
        return ending(200, "gateway_error")
    finally:
        if not is_broken:
            writer.flush()


async def _relay(
    take: Callable[[bytes], bytes], response: Response, first: bytes | None, writer: Writer
) -> bytes:
    """Relay from the upstream connection's callback straight to the writer; returns the last
    piece (sent with the end). A full client buffer pauses reading the engine until it drains."""
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

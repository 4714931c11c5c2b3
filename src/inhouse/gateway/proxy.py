"""`/v1/chat/completions` and `/v1/completions`: one raw ASGI handler per route.

Raw ASGI, not Starlette's Request/Response: the hot path pays for no object it does not use.
A request is a sequence of steps, each returning a value the next one reads: the admission
(`admission.Admitter.admit` → `Admission`), the answer of a replica (`attempt.answer` →
`Attempt`, after up to `proxy.retries` failed tries the client never sees, or `Unanswered`),
the relay of a 200 stream (`stream.relay_stream` → `Ending`, or `Broke`: it failed before its
first token, and the next replica is tried) or the answer whole, and the settle and the
record (`observation`). The response head goes to the client only with the engine's first
token; after that, a failure ends the stream with an error event the client sees. Nothing
accepted is dropped silently: every admitted request ends in a response, an error event, or a
logged client disconnect, and a client that leaves, in any phase, has its engine request
aborted within the moment (`client_watch.py`); its leaving is a returned `Ending` too.

Billing (the settle at the end) is `observation.billed_tokens`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from starlette.types import Receive, Scope, Send

from inhouse.gateway.admission import Admission
from inhouse.gateway.attempt import NO_TRIES, Attempt, Parts, Unanswered, answer, fail
from inhouse.gateway.client_watch import ClientWatch
from inhouse.gateway.observation import Ending, billed_tokens
from inhouse.gateway.prompt import ParsedRequest, parse_request
from inhouse.gateway.relay import NotJson, StreamState, usage_of_body
from inhouse.gateway.request_io import (
    chunk_writer,
    client_request_id,
    read_body,
    request_headers,
    send_error,
)
from inhouse.gateway.send_writer import SendWriter
from inhouse.gateway.service import Gateway
from inhouse.gateway.stream import SHUTDOWN_MESSAGE, Broke, relay_stream
from inhouse.http1.chunk_writer import ChunkWriter
from inhouse.http1.upstream import Response, UpstreamError
from inhouse.openai_errors import ApiError
from inhouse.spec.gateway import TenantSpec

log = logging.getLogger("inhouse.gateway")


class GenerationRoute:
    """The ASGI app of one generation route (`is_chat` picks chat or completions)."""

    def __init__(self, gateway: Gateway, path: str, is_chat: bool) -> None:
        self.gateway = gateway
        self.path = path
        self.is_chat = is_chat
        self.parts = Parts(gateway.backends, gateway.metrics, gateway.spec.proxy)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gateway = self.gateway
        gateway.begin()
        try:  # NOTE: whatever happens below, the in-flight count comes down (a drain waits on it)
            await self._handle(scope, receive, send)
        finally:
            gateway.end()

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        gateway = self.gateway
        t0 = time.perf_counter()
        headers = request_headers(scope)
        key = gateway.observer.ids.new()
        request_id = client_request_id(headers) or key
        rid_header = (b"x-request-id", request_id.encode("latin-1"))
        tenant: TenantSpec | None = None
        parsed: ParsedRequest | None = None
        watch: ClientWatch | None = None
        writer = chunk_writer(scope)
        try:
            if gateway.is_draining:
                raise ApiError(
                    503,
                    "The gateway is shutting down; retry on another one.",
                    reason="draining",
                    retry_after_s=1.0,
                )
            tenant = gateway.tenants.authenticate(headers.get(b"authorization"))
            length = headers.get(b"content-length")
            raw = await read_body(receive, length, gateway.spec.max_body_bytes)
            parsed = parse_request(raw, headers.get(b"content-type", ""), self.is_chat)
            session = headers.get(b"x-session-id")
            if session:
                parsed.session_key = session
            watch = ClientWatch(receive, writer)
            admission = await gateway.admission.admit(tenant, parsed, self.path, request_id, key,
                                                      t0)  # fmt: skip
        except ApiError as error:
            if watch is not None:
                watch.disarm()
            self._reject(tenant, parsed, error.status, error.reason, request_id, t0)
            await send_error(send, error, [rid_header])
            return
        except ConnectionAbortedError:
            return  # the client left while sending its body
        except asyncio.CancelledError:
            if watch is None or not watch.absorb():
                raise
            watch.disarm()  # the client left during admission (the limit store, the count)
            gateway.metrics.disconnects.child("admission").inc()
            self._reject(tenant, parsed, 499, "client_disconnect", request_id, t0)
            return
        except BaseException:
            if watch is not None:
                watch.disarm()
            raise
        observer = gateway.observer
        if observer.keeps_records:
            admission.client = observer.addresses.client_of(scope, headers.get(b"x-forwarded-for"))
        await self._serve(admission, send, rid_header, writer, watch)

    def _reject(
        self,
        tenant: TenantSpec | None,
        parsed: ParsedRequest | None,
        status: int,
        reason: str,
        request_id: str,
        t0: float,
    ) -> None:
        gateway = self.gateway
        name = tenant.name if tenant is not None else ""
        model = gateway.admission.model_label(parsed.model) if parsed is not None else ""
        gateway.observer.rejected(name, model, status, reason, request_id, parsed, t0)

    async def _serve(
        self,
        admission: Admission,
        send: Send,
        rid: tuple[bytes, bytes],
        writer: ChunkWriter | None,
        watch: ClientWatch,
    ) -> None:
        """The request's steps, each a returned value: the answer of a replica (`answer`),
        relayed (`relay_stream`: a stream that broke before its first token goes to the next
        replica) or answered whole, or the refusal; then the settle."""
        parts = self.parts
        is_stream = admission.parsed.is_stream
        headers = [rid, (b"x-inhouse-pool", admission.pool.name.encode())]
        if admission.pool_reason.startswith("fallback"):
            headers.append((b"x-inhouse-fallback", admission.primary_pool.encode()))
        ending: Ending | None = None
        attempt: Attempt | None = None
        state: StreamState | None = None
        try:
            # A stream's head is readied as soon as the engine answers 200 and goes out with
            # the first token (with the gateway's own server, from the engine connection's
            # callback: no task switch between the engine's first token and the client's).
            result = await answer(parts, admission, NO_TRIES, watch, is_stream)
            while isinstance(result, Attempt):
                attempt = result
                if not is_stream or attempt.response.status != 200:
                    ending = await self._whole(admission, attempt, send, headers, watch)
                    break
                kind = _content_type(attempt.response, b"text/event-stream")
                if not kind.startswith(b"text/event-stream"):
                    what = f"not an event stream ({_shown(kind)})"
                    ending = await self._not_an_answer(attempt, send, headers, what)
                    break
                state = StreamState(admission.parsed.wants_usage)
                if writer is not None:
                    relayed = await relay_stream(parts, admission, attempt, send, writer, headers,
                                                 state, watch)  # fmt: skip
                else:
                    adapter = SendWriter(send)
                    relayed = await relay_stream(parts, admission, attempt, adapter.send, adapter,
                                                 headers, state, watch)  # fmt: skip
                if not isinstance(relayed, Broke):
                    ending = relayed
                    break
                tries = fail(parts, admission, relayed.failed, attempt.tries)
                attempt = state = None
                result = await answer(parts, admission, tries, watch, True)
            if ending is None:
                assert not isinstance(result, Attempt)
                ending = result if isinstance(result, Ending) else await self._refuse(
                    admission, result, send, rid, watch)  # fmt: skip
        except asyncio.CancelledError:
            # Not the client leaving (each step takes that back as an `Ending`): the server's
            # shutdown cut the request, past the drain. A stream's relay ended its stream with
            # an error event; a client that saw nothing gets a 503 to retry on, not a cut
            # connection.
            if state is None and ending is None:
                ending = await _cut(send, rid, attempt)
            raise
        finally:
            watch.disarm()
            if attempt is not None:
                attempt.response.close()  # the engine stops: its request's connection closes
                parts.backends.release(attempt.placement)
            await self._finish(admission, ending or _abandoned(attempt, state))

    async def _whole(
        self,
        admission: Admission,
        attempt: Attempt,
        send: Send,
        headers: list[tuple[bytes, bytes]],
        watch: ClientWatch,
    ) -> Ending:
        """A response answered whole (not a 200 stream)."""
        response = attempt.response
        replica = attempt.placement.replica.label
        route, retries = attempt.placement.reason_label, attempt.tries.num_failed
        try:
            try:
                rest = await response.read_all() if attempt.first is not None else b""
            except UpstreamError as exc:
                error = ApiError(
                    502, f"The engine failed mid-response: {exc}", reason="upstream_error"
                )
                await send_error(send, error, headers[:1])
                return Ending(502, error.reason, replica, route, retries, was_sent=True)
            body = (attempt.first or b"") + rest
            kind = _content_type(response, b"application/json")
            status = response.status
            usage = None
            if status == 200:
                try:
                    usage = usage_of_body(body)
                except NotJson:
                    what = f"not JSON ({_shown(kind)}, {len(body)} bytes)"
                    return await self._not_an_answer(attempt, send, headers, what)
            head = [(b"content-type", kind), (b"content-length", str(len(body)).encode()),
                    *headers, attempt.overhead_header(admission.arrival_s)]  # fmt: skip
            await send({"type": "http.response.start", "status": status, "headers": head})
            await send({"type": "http.response.body", "body": body})
        except asyncio.CancelledError:
            if not watch.absorb():
                raise
            return Ending(499, "client_disconnect", replica, route, retries, is_client_gone=True,
                          was_sent=True, phase="engine")  # fmt: skip
        if status != 200:
            return Ending(status, "", replica, route, retries, was_sent=True)
        return Ending(200, "", replica, route, retries, usage, is_served=True,
                      was_sent=True)  # fmt: skip

    async def _not_an_answer(
        self, attempt: Attempt, send: Send, headers: list[tuple[bytes, bytes]], what: str
    ) -> Ending:
        """A 200 that is not an engine's answer: a body that is not JSON, or, to a stream
        request, no event stream (an ingress's default page, a login portal at its address).
        A 502 the client can act on, a failure of the replica, never a success relayed: the
        page relayed as a stream's body read as an empty answer to an OpenAI client."""
        placement = attempt.placement
        replica = placement.replica
        if replica.record_failure(self.gateway.spec.health):
            log.warning("replica %s/%s removed: answers 200 with a body that is %s",
                        replica.pool, replica.index, what)  # fmt: skip
        message = (
            f"The engine at replica {replica.label} of pool {replica.pool!r} answered 200 with "
            f"a body that is {what}; is an engine listening at its address? Please retry."
        )
        error = ApiError(502, message, reason="upstream_error", retry_after_s=1.0)
        await send_error(send, error, headers[:1])
        return Ending(502, error.reason, replica.label, placement.reason_label,
                      attempt.tries.num_failed, was_sent=True)  # fmt: skip

    async def _refuse(
        self,
        admission: Admission,
        unanswered: Unanswered,
        send: Send,
        rid: tuple[bytes, bytes],
        watch: ClientWatch,
    ) -> Ending:
        """No replica took or answered the request: the refusal, in OpenAI's shape."""
        error, retries = unanswered.error, unanswered.tries.num_failed
        try:
            await send_error(send, error, [rid])
        except asyncio.CancelledError:
            if not watch.absorb():
                raise
            phase = "engine" if retries else "queued"
            return Ending(499, "client_disconnect", retries=retries, is_client_gone=True,
                          was_sent=retries > 0, phase=phase)  # fmt: skip
        if error.reason in ("queue_full", "no_replica"):
            self.gateway.metrics.rejections.child(admission.tenant.name, error.reason).inc()
        return Ending(error.status, error.reason, retries=retries, was_sent=retries > 0)

    async def _finish(self, admission: Admission, ending: Ending) -> None:
        gateway = self.gateway
        prompt, completion = billed_tokens(admission, ending)
        await gateway.admission.settle(admission, prompt + completion)
        gateway.observer.finished(admission, ending, prompt, completion)


def _content_type(response: Response, default: bytes) -> bytes:
    return next((v for k, v in response.headers if k == b"content-type"), default)


def _shown(kind: bytes) -> str:
    """A content type as an error message quotes it (an engine's header: bounded)."""
    return kind.decode("latin-1")[:64]


async def _cut(send: Send, rid: tuple[bytes, bytes], attempt: Attempt | None) -> Ending:
    """The 503 for a request the shutdown cut before its client saw a byte (best effort: the
    connection may be gone)."""
    error = ApiError(503, SHUTDOWN_MESSAGE, reason="draining", retry_after_s=1.0)
    with contextlib.suppress(Exception):
        await send_error(send, error, [rid])
    if attempt is None:
        return Ending(503, error.reason)
    placement = attempt.placement
    return Ending(503, error.reason, placement.replica.label, placement.reason_label,
                  attempt.tries.num_failed, was_sent=True)  # fmt: skip


def _abandoned(attempt: Attempt | None, state: StreamState | None) -> Ending:
    """How a request ended that neither answered nor was refused: its task was cancelled by
    someone other than its client (the server shutting down), or the gateway failed."""
    if attempt is None:
        return Ending(502)
    placement = attempt.placement
    return Ending(
        200 if state is not None else 502,
        replica=placement.replica.label,
        route=placement.reason_label,
        retries=attempt.tries.num_failed,
        usage=state.usage if state is not None else None,
        num_events=state.num_events if state is not None else 0,
        was_sent=True,
    )

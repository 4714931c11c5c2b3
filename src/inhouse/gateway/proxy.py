"""`/v1/chat/completions` and `/v1/completions`: one raw ASGI handler per route.

Raw ASGI, not Starlette's Request/Response: the hot path pays for no object it does not use.
The response head goes to the client only with the engine's first token (for a stream served
by the gateway's own server, `http_server.py`, written from the engine connection's callback,
head and token in one write), so a replica that fails before it is retried on another one (at most
`proxy.retries` times) and the client never sees it; after that, a failure ends the stream
with an error event the client sees. Nothing accepted is dropped silently: every admitted
request ends in a response, an error event, or a logged client disconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from inhouse.gateway.chunk_writer import EXTENSION, ChunkWriter
from inhouse.gateway.dispatch import Placement
from inhouse.gateway.errors import GatewayError
from inhouse.gateway.prompt import ParsedRequest, parse_request
from inhouse.gateway.relay import (
    USAGE_MARK,
    StreamState,
    error_event,
    flush,
    is_role_only,
    relay_piece,
    usage_of_body,
)
from inhouse.gateway.service import Admission, Gateway
from inhouse.gateway.upstream import Response, UpstreamError
from inhouse.spec.gateway import TenantSpec

RETRY_STATUSES = frozenset((500, 502, 503, 504))
SSE_TYPE = b"text/event-stream; charset=utf-8"
log = logging.getLogger("inhouse.gateway")


_HEADERS = frozenset(
    (b"authorization", b"content-length", b"content-type", b"x-request-id", b"x-session-id")
)


def request_headers(scope: Scope) -> dict[bytes, str]:
    """The headers the generation routes read, each its first value, in one pass."""
    found: dict[bytes, str] = {}
    for key, value in scope["headers"]:
        if key in _HEADERS and key not in found:
            found[key] = value.decode("latin-1")
    return found


async def read_body(receive: Receive, length: str | None, limit: int) -> bytes:
    if length is not None and length.isdigit() and int(length) > limit:
        raise GatewayError(
            413,
            f"The request body is {int(length)} bytes; this gateway accepts at most {limit}.",
            param="body",
            reason="body_too_large",
        )
    parts = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise GatewayError(
                413,
                f"The request body exceeds {limit} bytes, the most this gateway accepts.",
                param="body",
                reason="body_too_large",
            )
        parts.append(chunk)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def chunk_writer(scope: Scope) -> ChunkWriter | None:
    """The server's direct chunk writer (`http_server.GatewayProtocol`), if it offers one."""
    extensions = scope.get("extensions")
    if not extensions or scope.get("http_version") != "1.1":
        return None
    writer: ChunkWriter | None = extensions.get(EXTENSION)
    return writer


async def send_error(send: Send, error: GatewayError, extra: list[tuple[bytes, bytes]]) -> None:
    body = error.body()
    headers = [*error.headers(), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class GenerationRoute:
    """The ASGI app of one generation route (`is_chat` picks chat or completions)."""

    def __init__(self, gateway: Gateway, path: str, is_chat: bool) -> None:
        self.gateway = gateway
        self.path = path
        self.is_chat = is_chat

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gateway = self.gateway
        t0 = time.perf_counter()
        headers = request_headers(scope)
        key = gateway.ids.new()
        request_id = headers.get(b"x-request-id") or key
        rid_header = (b"x-request-id", request_id.encode())
        tenant: TenantSpec | None = None
        parsed: ParsedRequest | None = None
        admission: Admission | None = None
        gateway.begin()
        try:
            if gateway.is_draining:
                raise GatewayError(
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
            admission = await gateway.admit(tenant, parsed, self.path, request_id, key, t0)
        except GatewayError as error:
            gateway.end()
            self._reject(tenant, parsed, error, request_id, t0)
            await send_error(send, error, [rid_header])
            return
        except ConnectionAbortedError:
            gateway.end()
            return
        try:
            await self._serve(admission, receive, send, rid_header, chunk_writer(scope))
        finally:
            gateway.end()

    def _reject(
        self,
        tenant: TenantSpec | None,
        parsed: ParsedRequest | None,
        error: GatewayError,
        request_id: str,
        t0: float,
    ) -> None:
        metrics = self.gateway.metrics
        name = tenant.name if tenant is not None else ""
        model = (parsed.model or "") if parsed is not None else ""
        metrics.rejections.child(name, error.reason).inc()
        metrics.requests.child(name, model, "", "", str(error.status)).inc()
        if not self.gateway.keeps_records:
            return
        record = {
            "request_id": request_id,
            "tenant": name,
            "model": model,
            "status": error.status,
            "reason": error.reason,
            "e2e_ms": round(1000 * (time.perf_counter() - t0), 3),
        }
        self.gateway.log_request(record, parsed)

    async def _serve(
        self,
        admission: Admission,
        receive: Receive,
        send: Send,
        rid: tuple[bytes, bytes],
        writer: ChunkWriter | None,
    ) -> None:
        gateway = self.gateway
        outcome = _Outcome()
        # With the direct writer a stream's head is readied as soon as the engine answers 200
        # and goes out with the first token from the engine connection's callback: no task
        # switch between the engine's first token and the client's.
        early = writer is not None and admission.parsed.is_stream
        try:
            response, first = await self._dispatch(admission, outcome, early)
            headers = [rid, (b"x-inhouse-pool", admission.pool.name.encode())]
            if admission.pool_reason.startswith("fallback"):
                headers.append((b"x-inhouse-fallback", admission.primary_pool.encode()))
            if admission.parsed.is_stream and response.status == 200:
                other = await self._stream(
                    admission, response, first, send, receive, headers, outcome, writer
                )
                if other is None:
                    return
                response, first = other  # a retry after a failure before the first token
            await self._whole(admission, response, first, send, headers, outcome)
        except GatewayError as error:
            outcome.status = error.status
            outcome.reason = error.reason
            await send_error(send, error, [rid])
            if error.reason in ("queue_full", "no_replica"):
                gateway.metrics.rejections.child(admission.tenant.name, error.reason).inc()
        finally:
            if outcome.placement is not None:
                gateway.dispatcher.release(outcome.placement)
            await self._finish(admission, outcome.placement, outcome)

    async def _dispatch(
        self, admission: Admission, outcome: _Outcome, early: bool = False
    ) -> tuple[Response, bytes | None]:
        """Place, send, and get the head and first body bytes, retrying other replicas on a
        failure before the first byte (`outcome.placement` is the replica's). With `early`, a
        200 returns before any body byte (b""): `_stream` holds everything back until the first
        token and, on a failure before it, continues the attempts here."""
        gateway = self.gateway
        spec = gateway.spec
        for attempt in range(outcome.retries, spec.proxy.retries + 1):
            placement = await gateway.place(admission, outcome.exclude)
            outcome.placement = placement
            replica = placement.replica
            path = replica.path_prefix + admission.path
            outcome.sent_s = time.perf_counter()
            try:
                try:
                    response = await replica.upstream.request(
                        "POST",
                        path,
                        admission.body,
                        admission.key,
                        spec.proxy.first_byte_timeout_s,
                    )
                finally:  # counted once the request is on its way, not in its way
                    if attempt == 0:
                        gateway.metrics.decisions.child(
                            admission.pool.name, replica.label, placement.reason_label
                        ).inc()
                if response.status in RETRY_STATUSES and attempt < spec.proxy.retries:
                    text = await response.read_all()
                    raise UpstreamError(f"engine answered {response.status}: {text[:200]!r}", True)
                if early and response.status == 200:
                    outcome.first_byte_s = time.perf_counter()
                    return response, b""
                first = await response.read()
                while first is not None and is_role_only(first):
                    more = await response.read()
                    if more is None:
                        break
                    first += more
                outcome.first_byte_s = time.perf_counter()
            except UpstreamError as exc:
                self._failed(admission, outcome, exc)
                continue
            replica.num_failures = 0
            return response, first
        raise GatewayError(
            502,
            f"No replica of pool {admission.pool.name!r} answered ({outcome.last_error}). "
            "Please retry.",
            reason="upstream_error",
            retry_after_s=1.0,
        )

    def _failed(self, admission: Admission, outcome: _Outcome, exc: UpstreamError) -> None:
        """An attempt that failed before the client saw a byte: count it against the replica
        and let go of it (the next attempt goes elsewhere)."""
        gateway = self.gateway
        placement = outcome.placement
        assert placement is not None
        replica = placement.replica
        outcome.last_error = str(exc)
        outcome.retries += 1
        gateway.metrics.retries.child(admission.pool.name, replica.label).inc()
        if replica.record_failure(gateway.spec.health):
            log.warning("replica %s/%s removed: %s", replica.pool, replica.index, exc)
        gateway.dispatcher.release(placement)
        outcome.placement = None
        outcome.exclude = outcome.exclude | {replica.index}

    async def _whole(
        self,
        admission: Admission,
        response: Response,
        first: bytes | None,
        send: Send,
        headers: list[tuple[bytes, bytes]],
        outcome: _Outcome,
    ) -> None:
        assert outcome.placement is not None
        outcome.replica = outcome.placement.replica.label
        try:
            rest = await response.read_all() if first is not None else b""
        except UpstreamError as exc:
            raise GatewayError(
                502, f"The engine failed mid-response: {exc}", reason="upstream_error"
            ) from None
        body = (first or b"") + rest
        kind = next((v for k, v in response.headers if k == b"content-type"), b"application/json")
        headers = [
            (b"content-type", kind),
            (b"content-length", str(len(body)).encode()),
            *headers,
            overhead_header(admission, outcome),
        ]
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        outcome.status = response.status
        if response.status == 200:
            outcome.usage = usage_of_body(body)
            outcome.is_served = True

    async def _stream(
        self,
        admission: Admission,
        response: Response,
        first: bytes | None,
        send: Send,
        receive: Receive,
        headers: list[tuple[bytes, bytes]],
        outcome: _Outcome,
        writer: ChunkWriter | None,
    ) -> tuple[Response, bytes | None] | None:
        """Relay a 200 stream. Returns None when the response is over, or the engine response
        to answer with instead (not a stream) when a failure before the first token led to a
        retry that got one."""
        gateway = self.gateway
        outcome.status = 200
        state = StreamState(admission.parsed.wants_usage)
        held: list[bytes] = []  # what came before the first token (the chat role chunk)

        def on_disconnect(_: object = None) -> None:
            if outcome.is_relaying:  # the client left mid-stream: stop the engine's work
                response.abort()

        outcome.is_relaying = True
        gone: asyncio.Future[Any] | None = None
        if writer is None:
            gone = asyncio.ensure_future(receive())
            gone.add_done_callback(on_disconnect)
        else:
            writer.watch(on_disconnect)
        # With the direct writer the head is held until the first token (one write for both).
        head = [(b"content-type", SSE_TYPE), (b"cache-control", b"no-cache"), *headers,
                overhead_header(admission, outcome)]  # fmt: skip

        def take(piece: bytes) -> bytes:
            if (
                outcome.is_served  # the first token went out: nothing is held any more
                and not state.carry
                and piece.endswith(b"\n\n")
                and USAGE_MARK not in piece
            ):
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

        is_released = False
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
                    self._failed(admission, outcome, exc)
                    try:
                        response, first = await self._dispatch(admission, outcome, True)
                    except GatewayError as error:
                        if writer.unstart():
                            raise
                        raise UpstreamError(error.message, False) from None
                    if response.status != 200:
                        if writer.unstart():
                            is_released = True  # handed back: answered whole by the caller
                            return response, first
                        raise UpstreamError(f"engine answered {response.status}", False) from None
                    state = StreamState(admission.parsed.wants_usage)
                    held.clear()
            tail = b"".join(held) + tail + flush(state)
            outcome.is_relaying = False
            response.release()
            is_released = True
            await send({"type": "http.response.body", "body": tail, "more_body": False})
        except UpstreamError as exc:
            is_gone = writer.is_lost if writer is not None else gone is not None and gone.done()
            if is_gone:
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
            outcome.is_relaying = False
            if not is_released:  # cancelled, or failed: the connection's state is unknown
                response.abort()
            if writer is not None:
                writer.watch(None)
                writer.flush()
            elif gone is not None and not gone.done():
                gone.cancel()
            outcome.usage = state.usage
            outcome.num_events = state.num_events
        return None

    async def _finish(
        self, admission: Admission, placement: Placement | None, outcome: _Outcome
    ) -> None:
        gateway = self.gateway
        metrics = gateway.metrics
        tenant = admission.tenant.name
        pool = admission.pool.name
        usage = outcome.usage or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        if outcome.usage is None:  # no usage came back: charge what surely was used
            served = outcome.is_served
            prompt = admission.num_prompt_tokens if served else 0
            completion = outcome.num_events if served else 0
        await gateway.settle(admission, prompt + completion)
        end = time.perf_counter()
        metrics.requests.child(
            tenant, admission.model, pool, outcome.replica, str(outcome.status)
        ).inc()
        if prompt or completion:
            metrics.tokens.child(tenant, admission.model, "prompt").inc(prompt)
            metrics.tokens.child(tenant, admission.model, "completion").inc(completion)
        ttft_ms = None
        if outcome.first_token_s:
            ttft = outcome.first_token_s - admission.arrival_s
            ttft_ms = round(1000 * ttft, 3)
            metrics.ttft.child(tenant, admission.model, pool).observe(ttft)
        if outcome.status < 400:
            metrics.e2e.child(tenant, admission.model, pool).observe(end - admission.arrival_s)
        if not gateway.keeps_records:
            return
        record: dict[str, Any] = {
            "request_id": admission.request_id,
            "tenant": tenant,
            "model": admission.model,
            "pool": pool,
            "replica": outcome.replica,
            "status": outcome.status,
            "stream": admission.parsed.is_stream,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "ttft_ms": ttft_ms,
            "e2e_ms": round(1000 * (end - admission.arrival_s), 3),
            "retries": outcome.retries,
            "route": placement.reason_label if placement is not None else None,
        }
        if outcome.reason:
            record["reason"] = outcome.reason
        if admission.key != admission.request_id:
            record["engine_request_id"] = admission.key  # the client's id is not unique
        gateway.log_request(record, admission.parsed)


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


def overhead_header(admission: Admission, outcome: _Outcome) -> tuple[bytes, bytes]:
    """`x-inhouse-overhead-ms`: the gateway's own time before the response head, without the
    engine's (arrival to the request written, plus first engine bytes to the head sent)."""
    own = (outcome.sent_s - admission.arrival_s) + (time.perf_counter() - outcome.first_byte_s)
    return (b"x-inhouse-overhead-ms", f"{1000 * own:.3f}".encode())


class _Outcome:
    __slots__ = (
        "exclude",
        "first_byte_s",
        "first_token_s",
        "is_relaying",
        "is_served",
        "last_error",
        "num_events",
        "placement",
        "reason",
        "replica",
        "retries",
        "sent_s",
        "status",
        "usage",
    )

    def __init__(self) -> None:
        self.is_relaying = False
        self.is_served = False
        self.sent_s = 0.0
        self.first_byte_s = 0.0
        self.status = 502
        self.replica = ""
        self.reason = ""
        self.retries = 0
        self.first_token_s = 0.0
        self.num_events = 0
        self.usage: dict[str, Any] | None = None
        self.placement: Placement | None = None
        self.exclude: frozenset[int] = frozenset()
        self.last_error = "no attempt"

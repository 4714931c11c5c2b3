"""`/v1/chat/completions` and `/v1/completions`: one raw ASGI handler per route.

Raw ASGI, not Starlette's Request/Response: the hot path pays for no object it does not use.
The response head goes to the client only with the engine's first token (for a stream served
by the gateway's own server, `http_server.py`, written from the engine connection's callback,
head and token in one write; `stream.py`), so a replica that fails before it is retried on
another one (at most `proxy.retries` times) and the client never sees it; after that, a
failure ends the stream with an error event the client sees. Nothing accepted is dropped
silently: every admitted request ends in a response, an error event, or a logged client
disconnect, and a client that leaves, in any phase, has its engine request aborted within
the moment (`client_watch.py`).

Billing (the settle at the end): the engine's usage when it came; when it did not, what
surely went out: the prompt and every event relayed for a stream that reached the client
or that the client left, the whole reservation for a non-streamed request the client left
after it was sent (the engine's work on it is unknown), nothing for a request no engine took.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from starlette.types import Receive, Scope, Send

from inhouse.gateway.client_watch import ClientWatch
from inhouse.gateway.dispatch import Placement
from inhouse.gateway.errors import GatewayError
from inhouse.gateway.prompt import ParsedRequest, parse_request
from inhouse.gateway.relay import is_role_only, usage_of_body
from inhouse.gateway.request_io import (
    chunk_writer,
    client_request_id,
    read_body,
    request_headers,
    send_error,
)
from inhouse.gateway.service import Admission, Gateway
from inhouse.gateway.stream import relay_stream
from inhouse.http1.chunk_writer import ChunkWriter
from inhouse.http1.upstream import Response, UpstreamError
from inhouse.spec.gateway import TenantSpec

RETRY_STATUSES = frozenset((500, 502, 503, 504))
log = logging.getLogger("inhouse.gateway")


class GenerationRoute:
    """The ASGI app of one generation route (`is_chat` picks chat or completions)."""

    def __init__(self, gateway: Gateway, path: str, is_chat: bool) -> None:
        self.gateway = gateway
        self.path = path
        self.is_chat = is_chat

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
        key = gateway.ids.new()
        request_id = client_request_id(headers) or key
        rid_header = (b"x-request-id", request_id.encode("latin-1"))
        tenant: TenantSpec | None = None
        parsed: ParsedRequest | None = None
        watch: ClientWatch | None = None
        writer = chunk_writer(scope)
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
            watch = ClientWatch(receive, writer)
            admission = await gateway.admit(tenant, parsed, self.path, request_id, key, t0)
        except GatewayError as error:
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
        if gateway.keeps_records:
            admission.client = gateway.addresses.client_of(scope, headers.get(b"x-forwarded-for"))
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
        metrics = gateway.metrics
        name = tenant.name if tenant is not None else ""
        model = gateway.model_label(parsed.model) if parsed is not None else ""
        metrics.rejections.child(name, reason).inc()
        metrics.requests.child(name, model, "", "", str(status)).inc()
        if not gateway.keeps_records:
            return
        record = {
            "request_id": request_id,
            "tenant": name,
            "model": model,
            "status": status,
            "reason": reason,
            "e2e_ms": round(1000 * (time.perf_counter() - t0), 3),
        }
        gateway.log_request(record, parsed)

    async def _serve(
        self,
        admission: Admission,
        send: Send,
        rid: tuple[bytes, bytes],
        writer: ChunkWriter | None,
        watch: ClientWatch,
    ) -> None:
        gateway = self.gateway
        outcome = Outcome()
        # With the direct writer a stream's head is readied as soon as the engine answers 200
        # and goes out with the first token from the engine connection's callback: no task
        # switch between the engine's first token and the client's.
        early = writer is not None and admission.parsed.is_stream
        try:
            try:
                response, first = await self.dispatch(admission, outcome, early)
                headers = [rid, (b"x-inhouse-pool", admission.pool.name.encode())]
                if admission.pool_reason.startswith("fallback"):
                    headers.append((b"x-inhouse-fallback", admission.primary_pool.encode()))
                if admission.parsed.is_stream and response.status == 200:
                    other = await relay_stream(
                        self, admission, response, first, send, headers, outcome, writer
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
        except asyncio.CancelledError:
            if not watch.absorb():
                raise
            outcome.status = 499
            outcome.reason = "client_disconnect"
            outcome.is_client_gone = True
            gateway.metrics.disconnects.child(outcome.phase).inc()
        finally:
            watch.disarm()
            if outcome.response is not None:
                outcome.response.close()  # the engine stops: its request's connection closes
            if outcome.placement is not None:
                gateway.dispatcher.release(outcome.placement)
            await self._finish(admission, outcome.placement, outcome)

    async def dispatch(
        self, admission: Admission, outcome: Outcome, early: bool = False
    ) -> tuple[Response, bytes | None]:
        """Place, send, and get the head and first body bytes, retrying other replicas on a
        failure before the first byte (`outcome.placement` is the replica's). With `early`, a
        200 returns before any body byte (b""): `relay_stream` holds everything back until the
        first token and, on a failure before it, continues the attempts here."""
        gateway = self.gateway
        spec = gateway.spec
        for attempt in range(outcome.retries, spec.proxy.retries + 1):
            outcome.phase = "queued"
            placement = await gateway.place(admission, outcome.exclude)
            outcome.placement = placement
            outcome.phase = "engine"
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
                outcome.response = response
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
                self.failed(admission, outcome, exc)
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

    def failed(self, admission: Admission, outcome: Outcome, exc: UpstreamError) -> None:
        """An attempt that failed before the client saw a byte: count it against the replica
        and let go of it (the next attempt goes elsewhere)."""
        gateway = self.gateway
        placement = outcome.placement
        assert placement is not None
        replica = placement.replica
        outcome.last_error = str(exc)
        outcome.retries += 1
        if outcome.response is not None:
            outcome.response.close()
            outcome.response = None
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
        outcome: Outcome,
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
            self.overhead_header(admission, outcome),
        ]
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        outcome.status = response.status
        if response.status == 200:
            outcome.usage = usage_of_body(body)
            outcome.is_served = True

    def billed_tokens(self, admission: Admission, outcome: Outcome) -> tuple[int, int]:
        """(prompt, completion) tokens to settle: see the module's docstring."""
        usage = outcome.usage
        if usage is not None:
            return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        prompt = admission.num_prompt_tokens
        if outcome.is_served or outcome.num_events:
            return prompt, outcome.num_events
        if outcome.is_client_gone and outcome.sent_s:
            if admission.parsed.is_stream:
                return prompt, 0
            reserved = admission.reservation.tokens if admission.reservation else prompt
            return prompt, max(0, reserved - prompt)
        return 0, 0

    async def _finish(
        self, admission: Admission, placement: Placement | None, outcome: Outcome
    ) -> None:
        gateway = self.gateway
        metrics = gateway.metrics
        tenant = admission.tenant.name
        pool = admission.pool.name
        prompt, completion = self.billed_tokens(admission, outcome)
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
            "client": admission.client,
        }
        if outcome.reason:
            record["reason"] = outcome.reason
        if admission.key != admission.request_id:
            record["engine_request_id"] = admission.key  # the client's id is not unique
        gateway.log_request(record, admission.parsed)

    @staticmethod
    def overhead_header(admission: Admission, outcome: Outcome) -> tuple[bytes, bytes]:
        """`x-inhouse-overhead-ms`: the gateway's own time before the response head, without
        the engine's (arrival to the request written, plus first engine bytes to the head)."""
        own = (outcome.sent_s - admission.arrival_s) + (time.perf_counter() - outcome.first_byte_s)
        return (b"x-inhouse-overhead-ms", f"{1000 * own:.3f}".encode())


class Outcome:
    """What happened to an admitted request: where it went, what it got, how it ended."""

    __slots__ = (
        "exclude",
        "first_byte_s",
        "first_token_s",
        "is_client_gone",
        "is_served",
        "last_error",
        "num_events",
        "phase",
        "placement",
        "reason",
        "replica",
        "response",
        "retries",
        "sent_s",
        "status",
        "usage",
    )

    def __init__(self) -> None:
        self.is_served = False
        self.is_client_gone = False
        self.sent_s = 0.0
        self.first_byte_s = 0.0
        self.status = 502
        self.replica = ""
        self.reason = ""
        self.retries = 0
        self.first_token_s = 0.0
        self.num_events = 0
        self.phase = "queued"  # queued (waiting for a replica) | engine | stream
        self.usage: dict[str, Any] | None = None
        self.placement: Placement | None = None
        self.response: Response | None = None
        self.exclude: frozenset[int] = frozenset()
        self.last_error = "no attempt"

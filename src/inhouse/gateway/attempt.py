"""One try of an admitted request on one replica, and failover, as returned values.

`try_replica` places the request, sends it and reads the answer's head (and, unless the
answer is a stream to relay, its first body bytes); it returns what happened: an `Attempt`
(the replica answered), a `Failed` (it did not, before the client saw a byte), or an
`Ending` (the client left meanwhile). `answer` decides on those values: a failure counts
against its replica (`fail`, a new `Tries`) and the next try goes elsewhere, at most
`proxy.retries` times; then an `Unanswered` (the refusal to send). A request that failed on
a replica and finds no other is refused with that failure (502), not as if none was tried.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from inhouse.gateway.admission import Admission
from inhouse.gateway.backends import Backends
from inhouse.gateway.client_watch import ClientWatch
from inhouse.gateway.dispatch import Placement
from inhouse.gateway.metrics import GatewayMetrics
from inhouse.gateway.observation import Ending
from inhouse.gateway.relay import is_role_only
from inhouse.http1.upstream import Response, UpstreamError
from inhouse.openai_errors import ApiError
from inhouse.spec.gateway import ProxySpec

RETRY_STATUSES = frozenset((500, 502, 503, 504))


@dataclass(frozen=True, slots=True)
class Tries:
    """What the failed attempts so far leave behind: how many, where, the last error."""

    num_failed: int = 0
    exclude: frozenset[int] = frozenset()
    last_error: str = "no attempt"  # the replica's label and what went wrong there


NO_TRIES = Tries()


@dataclass(slots=True)  # not frozen, for its cost: see `observation.Ending`
class Attempt:
    """A replica's answer, before the client saw any of it."""

    placement: Placement
    response: Response
    first: bytes | None  # the first body bytes (b"": a stream, not read yet; None: no body)
    sent_s: float  # when the request went to the engine
    first_byte_s: float  # when its answer came
    tries: Tries  # the failed attempts before this one

    def overhead_header(self, arrival_s: float) -> tuple[bytes, bytes]:
        """`x-inhouse-overhead-ms`: the gateway's own time before the response head, without
        the engine's (arrival to the request written, plus first engine bytes to the head)."""
        own = (self.sent_s - arrival_s) + (time.perf_counter() - self.first_byte_s)
        return (b"x-inhouse-overhead-ms", f"{1000 * own:.3f}".encode())


@dataclass(frozen=True, slots=True)
class Failed:
    """An attempt that failed before the client saw a byte (the replica is still held)."""

    placement: Placement
    error: UpstreamError


@dataclass(frozen=True, slots=True)
class Unanswered:
    """No replica took or answered the request: the refusal to send, and the tries."""

    error: ApiError
    tries: Tries


@dataclass(frozen=True, slots=True)
class Parts:
    """The gateway's parts a try uses (one per route)."""

    backends: Backends
    metrics: GatewayMetrics
    proxy: ProxySpec


async def answer(
    parts: Parts, admission: Admission, tries: Tries, watch: ClientWatch, early: bool
) -> Attempt | Unanswered | Ending:
    """Try replicas until one answers, the retries are spent, or the client leaves."""
    while tries.num_failed <= parts.proxy.retries:
        try:
            result = await try_replica(parts, admission, tries, watch, early)
        except ApiError as error:  # the pool's queue is full, or no replica has room
            if error.reason == "no_replica" and tries.num_failed:
                return Unanswered(_failed_alone(admission, tries), tries)
            return Unanswered(error, tries)
        if not isinstance(result, Failed):
            return result
        tries = fail(parts, admission, result, tries)
    message = (
        f"No replica of pool {admission.pool.name!r} answered ({tries.last_error}). Please retry."
    )
    return Unanswered(ApiError(502, message, reason="upstream_error", retry_after_s=1.0), tries)


def _failed_alone(admission: Admission, tries: Tries) -> ApiError:
    """The request failed on a replica and no other is left to try: the failure, not "no
    replica is available" (a one-replica pool, or every other one down)."""
    message = (
        f"The request failed ({tries.last_error}) and no other replica of pool "
        f"{admission.pool.name!r} is available to retry it. Please retry."
    )
    return ApiError(502, message, reason="upstream_error", retry_after_s=1.0)


def fail(parts: Parts, admission: Admission, failed: Failed, tries: Tries) -> Tries:
    """Count a failed attempt against its replica and let go of it; the tries after it."""
    replica = failed.placement.replica
    parts.metrics.retries.child(admission.pool.name, replica.label).inc()
    parts.backends.failed(failed.placement, failed.error)
    error = f"replica {replica.label}: {failed.error}"
    return Tries(tries.num_failed + 1, tries.exclude | {replica.index}, error)


async def try_replica(
    parts: Parts, admission: Admission, tries: Tries, watch: ClientWatch, early: bool
) -> Attempt | Failed | Ending:
    """Place, send, and get the head and (unless `early` and 200) the first body bytes."""
    try:
        placement = await parts.backends.place(
            admission.pool,
            admission.view,
            admission.tier,
            admission.pool_reason,
            tries.exclude,
            admission.parsed.is_stream,  # only a stream's first token is seen (holdback)
        )
    except asyncio.CancelledError:
        if not watch.absorb():
            raise
        return Ending(499, "client_disconnect", retries=tries.num_failed, is_client_gone=True,
                      phase="queued")  # fmt: skip
    response: Response | None = None
    replica = placement.replica
    sent_s = time.perf_counter()
    try:
        # NOTE: the send is written out here, not a coroutine of its own: one frame less on
        # every request's path (measured by benchmarks/bench_gateway_path.py).
        try:
            response = await replica.upstream.request(
                "POST",
                replica.path_prefix + admission.path,
                admission.body,
                admission.key,
                parts.proxy.first_byte_timeout_s,
            )
        finally:  # counted once the request is on its way, not in its way
            if tries.num_failed == 0:
                parts.metrics.decisions.child(
                    admission.pool.name, replica.label, placement.reason_label
                ).inc()
        if response.status in RETRY_STATUSES and tries.num_failed < parts.proxy.retries:
            text = await response.read_all()
            raise UpstreamError(
                f"engine answered {response.status}: {text[:200]!r}", True, status=response.status
            )
        if early and response.status == 200:
            return Attempt(placement, response, b"", sent_s, time.perf_counter(), tries)
        first = await _first_bytes(response)
    except UpstreamError as exc:
        if response is not None:
            response.close()
        return Failed(placement, exc)
    except BaseException as exc:
        if response is not None:
            response.close()  # the engine stops: its request's connection closes
        parts.backends.release(placement)
        if isinstance(exc, asyncio.CancelledError) and watch.absorb():
            return Ending(499, "client_disconnect", route=placement.reason_label,
                          retries=tries.num_failed, is_client_gone=True, was_sent=True,
                          phase="engine")  # fmt: skip
        raise
    replica.num_failures = 0
    return Attempt(placement, response, first, sent_s, time.perf_counter(), tries)


async def _first_bytes(response: Response) -> bytes | None:
    """The first body bytes; a chat role chunk alone waits for what follows it."""
    first = await response.read()
    while first is not None and is_role_only(first):
        more = await response.read()
        if more is None:
            break
        first += more
    return first

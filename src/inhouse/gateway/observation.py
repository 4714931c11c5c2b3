"""What the gateway tells about its requests: request ids, metrics, the request log and trace
spans. The request path hands it returned values (`Ending`, a refusal's status and reason);
it decides nothing about a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inhouse.gateway.metrics import GatewayMetrics
from inhouse.gateway.prompt import ParsedRequest
from inhouse.gateway.request_io import ClientAddresses
from inhouse.gateway.tracing import record_span
from inhouse.spec.gateway import GatewaySpec

if TYPE_CHECKING:
    from inhouse.gateway.admission import Admission

access_log = logging.getLogger("inhouse.gateway.access")


# NOTE: `Ending` and `Attempt` (one or two per request) are slots dataclasses, not frozen ones:
# a frozen one's __init__ sets each field through object.__setattr__, measured 2.7 µs for
# this one against 0.4 µs. They are values all the same: built once, never changed.
@dataclass(slots=True)
class Ending:
    """How an admitted request ended: what the settle, the metrics and the log need."""

    status: int
    reason: str = ""
    replica: str = ""  # the replica's label ("" when none answered)
    route: str | None = None  # the placement's reason label
    retries: int = 0
    usage: dict[str, Any] | None = None  # the engine's, when it came
    num_events: int = 0  # stream events relayed
    first_token_s: float = 0.0
    is_served: bool = False  # the answer (or a stream's first token) went out
    is_client_gone: bool = False
    was_sent: bool = False  # the request reached an engine
    phase: str = ""  # where the client left: queued | engine | stream


def billed_tokens(admission: Admission, ending: Ending) -> tuple[int, int]:
    """(prompt, completion) tokens to settle: the engine's usage when it came; when it did
    not, what surely went out: the prompt and every event relayed for a stream that reached
    the client or that the client left, the whole reservation for a non-streamed request the
    client left after it was sent (the engine's work on it is unknown), nothing for a request
    no engine took."""
    usage = ending.usage
    if usage is not None:
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    prompt = admission.num_prompt_tokens
    if ending.is_served or ending.num_events:
        return prompt, ending.num_events
    if ending.is_client_gone and ending.was_sent:
        if admission.parsed.is_stream:
            return prompt, 0
        reserved = admission.reservation.tokens if admission.reservation else prompt
        return prompt, max(0, reserved - prompt)
    return 0, 0


class Observer:
    """Ids, metrics, the request log and tracing."""

    def __init__(self, spec: GatewaySpec, log_prompts: bool | None = None) -> None:
        self.spec = spec
        self.metrics = GatewayMetrics()
        self.ids = RequestIds()
        self.addresses = ClientAddresses(spec.server.trusted_proxies)
        self.log_prompts = spec.log.prompts if log_prompts is None else log_prompts
        self.tracer: Any | None = None
        self._lag_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._lag_task = asyncio.get_running_loop().create_task(self.metrics.watch_loop_lag())

    async def stop(self) -> None:
        lag_task, self._lag_task = self._lag_task, None
        if lag_task is not None:
            lag_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lag_task

    @property
    def keeps_records(self) -> bool:
        """Whether a request's record goes anywhere (the request log or a trace span): when
        not, the request path does not build it."""
        return self.tracer is not None or self.spec.log.requests

    def log_request(self, record: dict[str, Any], parsed: ParsedRequest | None) -> None:
        if self.tracer is not None:
            end = time.time()
            record_span(self.tracer, record, end - record["e2e_ms"] / 1000, end)
        if not self.spec.log.requests:
            return
        if self.log_prompts and parsed is not None:
            record["prompt"] = parsed.text if parsed.text is not None else parsed.token_ids
        access_log.info("request", extra={"fields": record})

    def rejected(
        self,
        tenant: str,
        model: str,
        status: int,
        reason: str,
        request_id: str,
        parsed: ParsedRequest | None,
        t0: float,
    ) -> None:
        """A request refused before admission (or the client left during it)."""
        metrics = self.metrics
        metrics.rejections.child(tenant, reason).inc()
        metrics.requests.child(tenant, model, "", "", str(status)).inc()
        if not self.keeps_records:
            return
        record = {
            "request_id": request_id,
            "tenant": tenant,
            "model": model,
            "status": status,
            "reason": reason,
            "e2e_ms": round(1000 * (time.perf_counter() - t0), 3),
        }
        self.log_request(record, parsed)

    def finished(self, admission: Admission, ending: Ending, prompt: int, completion: int) -> None:
        """An admitted request's metrics and record, once it is settled."""
        metrics = self.metrics
        tenant = admission.tenant.name
        pool = admission.pool.name
        end = time.perf_counter()
        if ending.is_client_gone:
            metrics.disconnects.child(ending.phase).inc()
        metrics.requests.child(
            tenant, admission.model, pool, ending.replica, str(ending.status)
        ).inc()
        if prompt or completion:
            metrics.tokens.child(tenant, admission.model, "prompt").inc(prompt)
            metrics.tokens.child(tenant, admission.model, "completion").inc(completion)
        ttft_ms = None
        if ending.first_token_s:
            ttft = ending.first_token_s - admission.arrival_s
            ttft_ms = round(1000 * ttft, 3)
            metrics.ttft.child(tenant, admission.model, pool).observe(ttft)
        if ending.status < 400:
            metrics.e2e.child(tenant, admission.model, pool).observe(end - admission.arrival_s)
        if self.keeps_records:
            self.log_request(_record(admission, ending, prompt, completion, ttft_ms, end),
                             admission.parsed)  # fmt: skip


def _record(
    admission: Admission,
    ending: Ending,
    prompt: int,
    completion: int,
    ttft_ms: float | None,
    end: float,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "request_id": admission.request_id,
        "tenant": admission.tenant.name,
        "model": admission.model,
        "pool": admission.pool.name,
        "replica": ending.replica,
        "status": ending.status,
        "stream": admission.parsed.is_stream,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "ttft_ms": ttft_ms,
        "e2e_ms": round(1000 * (end - admission.arrival_s), 3),
        "retries": ending.retries,
        "route": ending.route,
        "client": admission.client,
    }
    if ending.reason:
        record["reason"] = ending.reason
    if admission.key != admission.request_id:
        record["engine_request_id"] = admission.key  # the client's id is not unique
    return record


class RequestIds:
    """The gateway's own request ids: unique across gateways and restarts (a random prefix
    per process) and cheap (a counter after it: no system call per request)."""

    def __init__(self) -> None:
        self._prefix = f"gw-{secrets.token_hex(6)}-"
        self._next = itertools.count(1).__next__

    def new(self) -> str:
        return f"{self._prefix}{self._next():x}"

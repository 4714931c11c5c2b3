"""The gateway's request path, from body to settled limits:

    tenant = key → parse (400) → model (404/403) → count + gate (400) → reserve (429)
    → pool + replica (queue / 503) → proxy with retries before the first byte → settle

Everything a request touches lives on `Gateway`; the ASGI layer (`app.py`) only reads the body
and writes what this module answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inhouse.gateway.dispatch import (
    HASHING_POLICIES,
    Dispatcher,
    Placement,
    PoolState,
    build_policy,
    running_capacity,
)
from inhouse.gateway.errors import GatewayError
from inhouse.gateway.limits import LimitStore, MemoryLimits, Refusal, Reservation
from inhouse.gateway.metrics import GatewayMetrics
from inhouse.gateway.prompt import (
    ROUTER_BLOCK_TOKENS,
    LocalCounter,
    ParsedRequest,
    RemoteCounter,
    TokenCounter,
    prompt_blocks,
)
from inhouse.gateway.replicas import HealthMonitor, Replica
from inhouse.gateway.request_io import ClientAddresses, quoted
from inhouse.gateway.tenants import Tenants
from inhouse.gateway.tracing import record_span
from inhouse.routing.view import RequestView
from inhouse.spec.gateway import GatewaySpec, TenantSpec, TierSpec
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.tokenizer import SimpleTokenizer, load_tokenizer

try:
    import orjson

    def _dumps(body: dict[str, Any]) -> bytes:
        return orjson.dumps(body)
except ImportError:  # pragma: no cover
    import json

    def _dumps(body: dict[str, Any]) -> bytes:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


log = logging.getLogger("inhouse.gateway")
access_log = logging.getLogger("inhouse.gateway.access")


@dataclass(slots=True)
class Admission:
    """An admitted request: who, what, where, and what it reserved.

    `request_id` is the client's `x-request-id` (or `key` when it sent none): echoed and
    logged, but a client may reuse it. `key` is the gateway's own, unique, id: the routing
    policy's books, the limit store's leases and the engine know the request by it.
    """

    request_id: str
    key: str
    tenant: TenantSpec
    tier: TierSpec
    parsed: ParsedRequest
    model: str
    path: str
    pool: PoolState
    pool_reason: str
    primary_pool: str
    num_prompt_tokens: int
    reservation: Reservation | None
    body: bytes
    view: RequestView
    arrival_s: float
    client: str | None = None  # the client's address, for the log record


class Gateway:
    def __init__(
        self,
        stack: StackSpec,
        spec: GatewaySpec,
        pool_urls: Mapping[str, list[str]],
        demo_key: str | None = None,
        limits: LimitStore | None = None,
        log_prompts: bool | None = None,
        base_dir: Path | None = None,
    ) -> None:
        self.stack = stack
        self.spec = spec
        self.tenants = Tenants(spec, demo_key, base_dir)
        # NOTE: in memory a request always settles (its task's `finally`), so its lease never
        # outlives it; the lease only bounds a bug.
        self.limits: LimitStore = limits or MemoryLimits(lease_s=spec.proxy.request_timeout_s)
        self.addresses = ClientAddresses(spec.server.trusted_proxies)
        self.metrics = GatewayMetrics()
        self._lag_task: asyncio.Task[None] | None = None
        self.log_prompts = spec.log.prompts if log_prompts is None else log_prompts
        self.is_draining = False
        self.tracer: Any | None = None
        self.ids = RequestIds()
        self.num_active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.pools: dict[str, PoolState] = {}
        replicas: list[Replica] = []
        for pool in stack.pools:
            urls = list(pool_urls.get(pool.name, ()))
            state = self._build_pool(pool, urls)
            self.pools[pool.name] = state
            replicas.extend(state.replicas)
        self.dispatcher = Dispatcher(stack, self.pools, spec.health.scrape_max_age_s)
        self.monitor = HealthMonitor(replicas, spec.health, on_join=self._on_join)
        self.metrics.on_render(self._refresh_gauges)

    def _build_pool(self, pool: PoolSpec, urls: list[str]) -> PoolState:
        if len(urls) != pool.replicas:
            from inhouse.errors import SpecError

            raise SpecError(
                f"pool {pool.name!r}: {pool.replicas} replicas but {len(urls)} engine URLs; "
                "give --endpoints (written by `inhouse up`) or the pool's `urls`"
            )
        capacity = running_capacity(pool)
        proxy = self.spec.proxy
        max_inflight = proxy.max_inflight_per_replica or (capacity + pool.saturation_waiting)
        replicas = [
            Replica(pool.name, i, url, capacity, proxy.connect_timeout_s, proxy.upstream_idle_s)
            for i, url in enumerate(urls)
        ]
        counter: TokenCounter
        kind = self.stack.engine_of(pool)
        if (Path(pool.model) / "tokenizer.json").is_file():
            # NOTE: the model's own tokenizer, chat rendered with the ChatML-style template of
            # the simulated engine: exact for completions, close for chat on a real vLLM.
            counter = LocalCounter(load_tokenizer(pool.model, 1 << 17))
        elif kind == "simulated":
            counter = LocalCounter(SimpleTokenizer())
        else:
            counter = RemoteCounter(self._poster(pool.name))
        return PoolState(
            pool,
            replicas,
            build_policy(pool, ROUTER_BLOCK_TOKENS),
            max_inflight,
            counter,
            ROUTER_BLOCK_TOKENS,
            pool.routing.policy in HASHING_POLICIES,
        )

    def _poster(self, pool_name: str) -> Any:
        async def post(path: str, payload: dict[str, Any]) -> Any:
            pool = self.pools[pool_name]
            healthy = [r for r in pool.replicas if r.is_healthy] or pool.replicas
            replica = min(healthy, key=lambda r: r.num_inflight)
            response = await self.monitor.client.post(replica.url + path, json=payload)
            if response.status_code != 200:
                raise GatewayError(response.status_code, response.text[:500], param="prompt")
            return response.json()

        return post

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.limits.start()
        await self.monitor.start()
        self._lag_task = asyncio.get_running_loop().create_task(self.metrics.watch_loop_lag())

    async def stop(self) -> None:
        lag_task, self._lag_task = self._lag_task, None
        if lag_task is not None:
            lag_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lag_task
        await self.monitor.stop()
        await self.limits.close()

    async def drain(self, timeout_s: float) -> int:
        """Refuse new requests; wait up to `timeout_s` for the accepted ones. Returns how many
        were still running at the deadline."""
        self.is_draining = True
        log.info("draining: %d request(s) in flight, up to %.0f s", self.num_active, timeout_s)
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            log.warning("drain timeout with %d request(s) in flight", self.num_active)
        return self.num_active

    def _on_join(self, replica: Replica) -> None:
        self.dispatcher.drain(self.pools[replica.pool])

    def begin(self) -> None:
        self.num_active += 1
        self._idle.clear()

    def end(self) -> None:
        self.num_active -= 1
        if self.num_active == 0:
            self._idle.set()

    @property
    def is_ready(self) -> bool:
        return not self.is_draining and any(
            r.is_healthy for pool in self.pools.values() for r in pool.replicas
        )

    def _refresh_gauges(self, metrics: GatewayMetrics) -> None:
        is_up = getattr(self.limits, "is_up", None)
        if is_up is not None:  # a shared store (Redis): is it answering?
            metrics.store_up.child().set(int(is_up))
            metrics.store_errors.child().set(getattr(self.limits, "num_errors", 0))
        for pool in self.pools.values():
            metrics.queue_depth.child(pool.name).set(pool.num_queued)
            indexes = getattr(pool.policy, "indexes", None)
            for replica in pool.replicas:
                metrics.healthy.child(pool.name, replica.label).set(int(replica.is_healthy))
                metrics.inflight.child(pool.name, replica.label).set(replica.num_inflight)
                if indexes:
                    blocks = indexes[replica.index].num_blocks
                    metrics.index_blocks.child(pool.name, replica.label).set(blocks)

    # -- admission ------------------------------------------------------------------------

    def model_label(self, model: str | None) -> str:
        """`model` as a metric label: a name the stack serves, else "unknown" (a client's
        string never becomes a series of its own)."""
        if model is None:
            return self.stack.pools[0].client_model_name
        return model if model in self.dispatcher.models else "unknown"

    def model_names(self, tenant: TenantSpec) -> list[str]:
        names = [n for pool in self.stack.pools for n in pool.model_names]
        return [n for n in names if tenant.may_use(n)]

    def resolve_model(self, tenant: TenantSpec, model: str | None) -> tuple[str, PoolSpec]:
        if model is None:
            pool = self.stack.pools[0]
            model = pool.client_model_name
        else:
            found = self.dispatcher.models.get(model)
            if found is None:
                valid = ", ".join(self.model_names(tenant))
                raise GatewayError(
                    404,
                    f"The model `{quoted(model)}` does not exist. Valid aliases: {valid}.",
                    param="model",
                    reason="unknown_model",
                )
            pool = found
        if not tenant.may_use(model):
            raise GatewayError(
                403,
                f"This API key may not use the model `{model}`.",
                param="model",
                reason="forbidden",
                error_type="permission_denied",
            )
        return model, pool

    async def admit(
        self,
        tenant: TenantSpec,
        parsed: ParsedRequest,
        path: str,
        request_id: str,
        key: str,
        t0: float,
    ) -> Admission:
        model, primary = self.resolve_model(tenant, parsed.model)
        counted_pool = self.pools[primary.name]
        limit = self._count_limit(primary)
        num_prompt = await counted_pool.counter.count(parsed, model, limit)
        choice = self.dispatcher.choose_pool(model, num_prompt)
        if choice.pool is None:
            raise GatewayError(
                503,
                f"No replica serves the model `{model}` right now. Please try again later.",
                reason="no_replica",
                retry_after_s=5.0,
            )
        pool = self.pools[choice.pool]
        max_tokens = self._check_lengths(tenant, pool, parsed, num_prompt)
        body = parsed.body
        if pool.name != primary.name and model not in pool.spec.model_names:
            # The long-context or fallback pool serves another model: name it to its engine.
            body["model"] = pool.spec.client_model_name
        if parsed.max_tokens is None and tenant.limits.default_max_tokens is not None:
            body["max_tokens"] = max_tokens
        tier = self.tenants.tier_of(tenant)
        client_priority = body.get("priority")
        priority = tier.priority
        if isinstance(client_priority, int) and not isinstance(client_priority, bool):
            priority = max(priority, client_priority)  # a client may only step back
        body["priority"] = priority
        if parsed.is_stream:
            options = body.get("stream_options") or {}
            body["stream_options"] = {**options, "include_usage": True}
        # Each of `n` outputs may take max_tokens; the prompt is counted once, as vLLM does.
        reserved = num_prompt + max_tokens * parsed.num_choices
        reservation = await self._reserve(tenant, key, reserved)
        blocks: list[int] = []
        if pool.needs_hashes:
            blocks = prompt_blocks(parsed, pool.root(model), pool.block_tokens)
        view = RequestView(key, num_prompt, blocks, parsed.session_key, model)
        return Admission(
            request_id,
            key,
            tenant,
            tier,
            parsed,
            model,
            path,
            pool,
            choice.reason,
            primary.name,
            num_prompt,
            reservation,
            _dumps(body),
            view,
            t0,
        )

    def _count_limit(self, pool: PoolSpec) -> int:
        """Counted exactly up to the longest context the request could be sent to."""
        limit = self.pools[pool.name].max_model_len()
        if pool.long_pool is not None:
            longer = self.pools[pool.long_pool].max_model_len()
            if longer is not None and (limit is None or longer > limit):
                limit = longer
        return 1 << 22 if limit is None else limit

    def _check_lengths(
        self, tenant: TenantSpec, pool: PoolState, parsed: ParsedRequest, num_prompt: int
    ) -> int:
        """The long-prompt gate, vLLM's messages; returns the effective max_tokens."""
        max_len = pool.max_model_len()
        requested = parsed.max_tokens
        cap = tenant.limits.max_prompt_tokens
        if cap is not None and num_prompt > cap:
            raise GatewayError(
                400,
                f"This API key may send at most {cap} prompt tokens. However, your prompt "
                f"contains {num_prompt} input tokens. Please reduce the length of the input "
                f"prompt. (parameter=input_tokens, value={num_prompt})",
                param="input_tokens",
                reason="prompt_too_long",
            )
        if max_len is None:  # not known yet (no replica answered): the engine checks
            return requested or tenant.limits.default_max_tokens or 16
        if num_prompt > max_len:
            raise GatewayError(
                400,
                f"This model's maximum context length is {max_len} tokens. However, your prompt "
                f"contains at least {num_prompt} input tokens, which exceeds this limit even "
                "without any output tokens. Please reduce the length of the input prompt. "
                f"(parameter=input_tokens, value={num_prompt})",
                param="input_tokens",
                reason="prompt_too_long",
            )
        if requested is not None and requested > max_len:
            raise GatewayError(
                400,
                f"max_tokens={requested} cannot be greater than max_model_len={max_len}. "
                f"Please request fewer output tokens. (parameter=max_tokens, value={requested})",
                param="max_tokens",
                reason="prompt_too_long",
            )
        if requested is not None and num_prompt + requested > max_len:
            raise GatewayError(
                400,
                f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This "
                f"model's maximum context length is {max_len} tokens and your request has "
                f"{num_prompt} input tokens ({requested} > {max_len} - {num_prompt}).",
                param="max_tokens",
                reason="prompt_too_long",
            )
        default = tenant.limits.default_max_tokens
        room = max_len - num_prompt
        return requested or (min(default, room) if default else room)

    async def _reserve(self, tenant: TenantSpec, key: str, tokens: int) -> Reservation | None:
        limits = tenant.limits
        if not limits.needs_store:
            return None  # nothing to hold: no round trip to the store (Redis) at all
        result = await self.limits.reserve(tenant.name, limits, key, tokens)
        if isinstance(result, Refusal):
            raise GatewayError(
                result.status,
                result.message,
                reason=result.reason,
                retry_after_s=result.retry_after_s,
                error_type="rate_limit_exceeded" if result.status == 429 else None,
            )
        return result

    async def settle(self, admission: Admission, used: int) -> None:
        if admission.reservation is not None:
            await self.limits.settle(admission.reservation, admission.tenant.limits, used)

    async def place(self, admission: Admission, exclude: frozenset[int]) -> Placement:
        placement = await self.dispatcher.place(
            admission.pool, admission.view, admission.tier, exclude
        )
        placement.pool_reason = admission.pool_reason
        return placement

    # -- logging --------------------------------------------------------------------------

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


class RequestIds:
    """The gateway's own request ids: unique across gateways and restarts (a random prefix
    per process) and cheap (a counter after it: no system call per request)."""

    def __init__(self) -> None:
        self._prefix = f"gw-{secrets.token_hex(6)}-"
        self._next = itertools.count(1).__next__

    def new(self) -> str:
        return f"{self._prefix}{self._next():x}"


def monotonic() -> float:
    return time.perf_counter()

"""Admission: who may send what, where, within which limits.

    model (404/403) → text only + count + long-prompt gate (400) → pool → priority → reserve (429)

It owns the tenants and their keys, the limit store (rates, budgets, concurrency) and the
long-prompt gate; it asks `Backends` which pool serves a model. What it admits is an
`Admission`, the value the rest of the request path reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inhouse.gateway.backends import Backends
from inhouse.gateway.dispatch import PoolState
from inhouse.gateway.limits import LimitStore, Refusal, Reservation
from inhouse.gateway.metrics import GatewayMetrics
from inhouse.gateway.prompt import ParsedRequest, nested_too_deep, prompt_blocks, read_flag
from inhouse.gateway.request_io import quoted
from inhouse.gateway.tenants import Tenants
from inhouse.openai_errors import (
    ApiError,
    invalid,
    max_tokens_over_context,
    max_tokens_too_large,
    prompt_over_context,
    text_only_message,
    unknown_model,
)
from inhouse.routing.pools import PoolChoice
from inhouse.routing.view import RequestView
from inhouse.spec.gateway import TenantSpec, TierSpec
from inhouse.spec.stack import PoolSpec, StackSpec

try:
    import orjson

    def _dumps(body: dict[str, Any]) -> bytes:
        return orjson.dumps(body)
except ImportError:  # pragma: no cover
    import json

    def _dumps(body: dict[str, Any]) -> bytes:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


COMPLETION_MAX_TOKENS = 16  # what vLLM (and OpenAI) generate for a completion naming none


def _engine_default(parsed: ParsedRequest) -> int | None:
    """The max_tokens the engine uses when the request names none: 16 for a completion that
    leaves `max_tokens` out (an explicit null, like any chat, means the rest of the context)."""
    if parsed.is_chat or "max_tokens" in parsed.body:
        return None
    return COMPLETION_MAX_TOKENS


def _text_only(model: str, kind: str) -> str:
    """vLLM's words for a media part sent to a text-only model, and what to send instead."""
    return (
        f"{text_only_message(model)}: its pool serves text only, so a content part "
        f"of type `{kind}` cannot be sent to it. Send the content as text parts or a string."
    )


def _unbounded_output(pool: PoolState) -> str:
    """A request the gateway cannot bound (no max_tokens, the context length unknown) from a
    tenant with token limits. NOTE: refused rather than given a max_tokens of the gateway's
    choosing: a cap the client never asked for would cut its answers silently (finish_reason
    "length"), at a length that would depend on how much of its budget is left."""
    return (
        f"This API key's token limits need a bound on the output, but the context length of "
        f"pool `{pool.name}` is unknown to the gateway (the stack file states no "
        "`max_model_len` for it and its engines report none), so a request naming no "
        "max_tokens could generate past them. Set `max_tokens` (or `max_completion_tokens`)."
    )


def _stream_options(options: dict[str, Any] | None, parsed: ParsedRequest) -> dict[str, Any]:
    """A stream's `stream_options` as the engine gets them. `include_usage` is always on: the
    usage chunk settles token limits (the relay drops it again, and moves its
    `system_fingerprint` back onto the finish chunks, when the client did not ask for it).
    `continuous_usage_stats` is off unless the client asked `include_usage` too: vLLM ignores
    it alone, but with the gateway's `include_usage` it would put usage on every chunk.
    Options vLLM would refuse go as sent, for the engine's 400."""
    if not options:
        return {"include_usage": True}
    names = ("include_usage", "continuous_usage_stats")
    if any(read_flag(options.get(name)) is None for name in names):
        return options
    forwarded = {**options, "include_usage": True}
    if not parsed.wants_usage and "continuous_usage_stats" in options:
        forwarded["continuous_usage_stats"] = False
    return forwarded


def _forwarded(body: dict[str, Any]) -> bytes:
    """The body as the engine gets it; one nested deeper than the writer goes (orjson's 255
    levels, where its reader takes 1024) is the client's 400, not a 500."""
    try:
        return _dumps(body)
    except (TypeError, ValueError, RecursionError):
        raise nested_too_deep() from None


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


class Admitter:
    """Tenants, keys, limits and the long-prompt gate."""

    def __init__(
        self, stack: StackSpec, tenants: Tenants, limits: LimitStore, backends: Backends
    ) -> None:
        self.stack = stack
        self.tenants = tenants
        self.limits = limits
        self._pools = backends.pools
        self._dispatcher = backends.dispatcher

    def model_label(self, model: str | None) -> str:
        """`model` as a metric label: a name the stack serves, else "unknown" (a client's
        string never becomes a series of its own)."""
        if model is None:
            return self.stack.pools[0].client_model_name
        return model if model in self._dispatcher.models else "unknown"

    def model_names(self, tenant: TenantSpec) -> list[str]:
        names = [n for pool in self.stack.pools for n in pool.model_names]
        return [n for n in names if tenant.may_use(n)]

    def resolve_model(self, tenant: TenantSpec, model: str | None) -> tuple[str, PoolSpec]:
        if model is None:
            pool = self.stack.pools[0]
            model = pool.client_model_name
        else:
            found = self._dispatcher.models.get(model)
            if found is None:
                message = unknown_model(quoted(model), self.model_names(tenant))
                raise ApiError(404, message, param="model", reason="unknown_model")
            pool = found
        if not tenant.may_use(model):
            raise ApiError(
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
        if parsed.media_part is not None:  # before counting: such a part counts no tokens
            param, kind = parsed.media_part
            raise invalid(_text_only(model, kind), param=param, value=kind)
        counted_pool = self._pools[primary.name]
        num_prompt = await counted_pool.counter.count(parsed, model, self._count_limit(primary))
        choice = self._dispatcher.choose_pool(model, num_prompt)
        if choice.pool is None:
            raise ApiError(
                503,
                f"No replica serves the model `{model}` right now. Please try again later.",
                reason="no_replica",
                retry_after_s=5.0,
            )
        pool = self._pools[choice.pool]
        try:
            max_tokens = self._check_lengths(tenant, pool, parsed, num_prompt)
        except ApiError as error:
            choice, pool, max_tokens = self._to_long_pool(error, tenant, model, choice, parsed,
                                                          num_prompt)  # fmt: skip
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
            body["stream_options"] = _stream_options(body.get("stream_options"), parsed)
        # Each of `n` outputs may take max_tokens; the prompt is counted once, as vLLM does.
        reserved = num_prompt + max_tokens * parsed.num_choices
        forwarded = _forwarded(body)  # before the reserve: a body it cannot write holds nothing
        reservation = await self._reserve(tenant, key, reserved)
        blocks: list[int] = []
        if pool.needs_hashes:
            blocks = prompt_blocks(parsed, pool.root(model), pool.block_tokens)
        view = RequestView(key, num_prompt, blocks, parsed.session_key, model)
        return Admission(request_id, key, tenant, tier, parsed, model, path, pool, choice.reason,
                         primary.name, num_prompt, reservation, forwarded, view, t0)  # fmt: skip

    def _to_long_pool(
        self,
        error: ApiError,
        tenant: TenantSpec,
        model: str,
        choice: PoolChoice,
        parsed: ParsedRequest,
        num_prompt: int,
    ) -> tuple[PoolChoice, PoolState, int]:
        """A request its model's pool must refuse for its length (prompt + max_tokens past the
        context, however short the prompt) goes where a long prompt would, when that pool can
        hold it: the length rule looks at the prompt alone, and the stack can serve it.
        Else `error`, the first pool's refusal, is raised."""
        spec = self._pools[choice.pool].spec if choice.pool is not None else None
        cap = tenant.limits.max_prompt_tokens
        if (
            error.reason != "prompt_too_long"
            or (cap is not None and num_prompt > cap)
            or choice.reason != "model"
            or spec is None
            or spec.long_pool is None
            or spec.long_prompt_tokens is None
        ):
            raise error
        longer = self._dispatcher.choose_pool(model, max(num_prompt, spec.long_prompt_tokens + 1))
        if longer.pool is None or longer.pool == spec.name:
            raise error
        pool = self._pools[longer.pool]
        try:
            max_tokens = self._check_lengths(tenant, pool, parsed, num_prompt)
        except ApiError:
            raise error from None
        return longer, pool, max_tokens

    def _count_limit(self, pool: PoolSpec) -> int:
        """Counted exactly up to the longest context the request could be sent to."""
        limit = self._pools[pool.name].max_model_len()
        if pool.long_pool is not None:
            longer = self._pools[pool.long_pool].max_model_len()
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
        reason = "prompt_too_long"
        if cap is not None and num_prompt > cap:
            message = (
                f"This API key may send at most {cap} prompt tokens. However, your prompt "
                f"contains {num_prompt} input tokens. Please reduce the length of the input "
                "prompt."
            )
            raise invalid(message, param="input_tokens", value=num_prompt, reason=reason)
        if max_len is None:  # not stated nor reported: the engine checks the lengths
            bounded = requested or tenant.limits.default_max_tokens or _engine_default(parsed)
            if bounded is None and tenant.limits.has_token_limits:
                raise invalid(_unbounded_output(pool), param="max_tokens")
            # NOTE: without token limits the figure only feeds the reservation, which counts
            # requests and slots alone; the body goes as sent and the engine bounds it.
            return bounded or COMPLETION_MAX_TOKENS
        if num_prompt > max_len:
            message = prompt_over_context(max_len, num_prompt)
            raise invalid(message, param="input_tokens", value=num_prompt, reason=reason)
        if requested is not None and requested > max_len:
            name = parsed.max_tokens_field
            message = max_tokens_over_context(requested, max_len, name)
            raise invalid(message, param=name, value=requested, reason=reason)
        if requested is not None and num_prompt + requested > max_len:
            message = max_tokens_too_large(requested, max_len, num_prompt)
            raise ApiError(400, message, param="max_tokens", reason=reason)
        default = tenant.limits.default_max_tokens or _engine_default(parsed)
        room = (pool.longest_context() or max_len) - num_prompt
        return requested or (min(default, room) if default else room)

    async def _reserve(self, tenant: TenantSpec, key: str, tokens: int) -> Reservation | None:
        limits = tenant.limits
        if not limits.needs_store:
            return None  # nothing to hold: no round trip to the store (Redis) at all
        result = await self.limits.reserve(tenant.name, limits, key, tokens)
        if isinstance(result, Refusal):
            raise ApiError(
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

    def export(self, metrics: GatewayMetrics) -> None:
        """The limit store's gauges, at each scrape (a shared store: is it answering?)."""
        is_up = getattr(self.limits, "is_up", None)
        if is_up is not None:
            metrics.store_up.child().set(int(is_up))
            metrics.store_errors.child().set(getattr(self.limits, "num_errors", 0))

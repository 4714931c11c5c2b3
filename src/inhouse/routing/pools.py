"""Pool choice: which pool of the stack serves a request, before any replica is chosen.

In order: the pool serving the requested model name (the stack's first pool when the request
names none); then the length rule — a prompt longer than the pool's `long_prompt_tokens` goes to
its `long_pool`, unless the name is one of the pool's `lora_adapters` (the long pool has no
adapter for it: a guest's prompts, long ones too, stay on the pool that carries its adapter, as
the plan sizes them); then the fallback — when the pool has no healthy replica, or every healthy
replica has `saturation_waiting` or more requests queued, its traffic goes to its `fallback`
pool, if that one is up and not saturated itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from inhouse.routing.view import ReplicaView
from inhouse.spec.stack import PoolSpec, StackSpec

PoolViews = Callable[[str], Sequence[ReplicaView]]


@dataclass(frozen=True, slots=True)
class PoolChoice:
    """The pool (None: no pool can take it) and why: `model`, `long_prompt`,
    `fallback_down`, `fallback_saturated`, `pool_down` or `unknown_model`."""

    pool: str | None
    reason: str


def is_down(views: Sequence[ReplicaView]) -> bool:
    return not any(view.is_healthy for view in views)


def is_saturated(views: Sequence[ReplicaView], saturation_waiting: int) -> bool:
    healthy = [view for view in views if view.is_healthy]
    return bool(healthy) and all(view.num_waiting >= saturation_waiting for view in healthy)


def primary_pool(stack: StackSpec, model: str | None, num_prompt_tokens: int) -> PoolChoice:
    """The pool by model name and length rule, before health and saturation are considered."""
    pool: PoolSpec | None = stack.pools[0] if model is None else stack.pool_for_model(model)
    if pool is None:
        return PoolChoice(None, "unknown_model")
    reason = "model"
    # A LoRA guest's chain is its pool alone (module docstring).
    for longer in stack.length_chain(pool, model)[1:]:
        if pool.long_prompt_tokens is None or num_prompt_tokens <= pool.long_prompt_tokens:
            break
        pool, reason = longer, "long_prompt"
    return PoolChoice(pool.name, reason)


def choose_pool(
    stack: StackSpec, model: str | None, num_prompt_tokens: int, views_of: PoolViews
) -> PoolChoice:
    """The pool for a request, given each pool's replica views (asked lazily, by name)."""
    choice = primary_pool(stack, model, num_prompt_tokens)
    if choice.pool is None:
        return choice
    pool = stack.pool(choice.pool)
    views = views_of(pool.name)
    if is_down(views):
        fallback = _usable_fallback(stack, pool, views_of)
        return PoolChoice(fallback, "fallback_down" if fallback else "pool_down")
    if is_saturated(views, pool.saturation_waiting):
        fallback = _usable_fallback(stack, pool, views_of)
        if fallback is not None:
            return PoolChoice(fallback, "fallback_saturated")
    return choice


def _usable_fallback(stack: StackSpec, pool: PoolSpec, views_of: PoolViews) -> str | None:
    if pool.fallback is None:
        return None
    fallback = stack.pool(pool.fallback)
    views = views_of(fallback.name)
    if is_down(views) or is_saturated(views, fallback.saturation_waiting):
        return None
    return fallback.name

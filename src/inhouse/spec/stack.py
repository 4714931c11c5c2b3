"""The stack file: the contract between `plan`, `up`, `simulate`, `render`, `bench` and `drill`.

A stack is a set of pools. A pool serves one model with identical engine replicas; clients name
the pool's `served_model_name` (or one of its `aliases`) in the `model` field. Optional rules:
prompts longer than a pool's `long_prompt_tokens` go to the pool named in `long_pool`; when a
pool is down or saturated its traffic goes to `fallback`. See docs/stack.md for every field.
Versioned: `version: 1` is the only version so far.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from inhouse.errors import SpecError
from inhouse.spec.base import MAX_REPLICAS, SpecModel
from inhouse.spec.errors_format import describe_validation_error
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.knobs import EngineKnobs as EngineKnobs  # the pools' `knobs:` (re-export)
from inhouse.spec.observability import ObservabilitySpec
from inhouse.spec.slo import LatencySlo
from inhouse.spec.triggers import Trigger
from inhouse.spec.weights import WeightsSpec, check_model_name
from inhouse.spec.workloads import WorkloadSpec
from inhouse.spec.yaml_load import load_yaml

STACK_VERSION = 1

EngineKind = Literal["simulated", "vllm", "sglang", "url"]
PoolRole = Literal["standard", "fast", "long", "fallback", "utility"]
# A name clients send as `model`: path components of letters, digits, '.', '_', '-' and ':'
# (Ollama-style tags such as `llama3.1:8b`), each starting with a letter or digit.
_SERVED_NAME = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}(/[A-Za-z0-9][A-Za-z0-9._:-]{0,127})*$"
)


class RoutingSpec(SpecModel):
    """Replica choice inside a pool; `params` are the policy's own (docs/routing.md)."""

    policy: str = "cache_aware"
    params: dict[str, float | int | str | bool] = Field(default_factory=dict)


class PoolSlo(LatencySlo):
    """A pool's service-level objectives (`inhouse.spec.slo`), from which `inhouse render` writes
    its alerts when the stack names no `workloads` of its own. A prefix-cache hit rate below
    `prefix_hit_rate_min` for 15 minutes files a ticket (null: no such alert; a plan's
    `prefix_hit_rate` trigger takes its place). Optional and additive to schema v1: a pool
    without `slo` gets render's documented defaults.
    """

    prefix_hit_rate_min: float | None = Field(default=0.6, ge=0, le=1)


class PoolSpec(SpecModel):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    model: str = Field(description="catalog name, Hugging Face id, or a local model directory")
    served_model_name: str | None = None
    aliases: tuple[str, ...] = ()
    lora_adapters: tuple[str, ...] = Field(
        default=(), description="LoRA adapter names served on this pool's base model"
    )
    role: PoolRole = "standard"
    engine: EngineKind | None = None
    backend: Literal["vllm", "sglang"] = "vllm"
    gpu: str = "h100_sxm"
    quant: str = "bf16"
    tp: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    knobs: EngineKnobs = Field(default_factory=EngineKnobs)
    routing: RoutingSpec = Field(default_factory=RoutingSpec)
    long_prompt_tokens: int | None = Field(
        default=None, gt=0, description="prompts above this many tokens go to `long_pool`"
    )
    long_pool: str | None = None
    fallback: str | None = None
    saturation_waiting: int = Field(
        default=32,
        gt=0,
        description="the pool is saturated (traffic goes to `fallback`) when every healthy "
        "replica has this many requests waiting",
    )
    urls: tuple[str, ...] = Field(default=(), description="engine URLs when engine is `url`")
    gpu_ids: tuple[tuple[int, ...], ...] = Field(
        default=(), description="per replica, the GPU indices it runs on (an NVLink group)"
    )
    slo: PoolSlo | None = Field(
        default=None, description="service-level objectives; render's alerts (docs/render.md)"
    )
    weights: WeightsSpec | None = Field(
        default=None, description="signed weights, verified before start (docs/weights.md)"
    )

    @model_validator(mode="after")
    def _check_names(self) -> PoolSpec:
        # NOTE: these names become PromQL label values (model_name="..."), vLLM arguments and,
        # for adapters, a directory under the LoRA root: a quote or a `..` would rewrite an
        # alert's query or climb out of the model cache.
        what = f"pool {self.name!r}:"
        names = [
            ("served_model_name", self.served_model_name),
            *(("alias", a) for a in self.aliases),
        ]
        for field, name in names:
            if name is not None and not _SERVED_NAME.match(name):
                raise SpecError(
                    f"{what} {field} {name!r} is not valid: use path components of letters, "
                    "digits, '.', '_', '-' and ':' separated by '/', each starting with a letter "
                    "or digit (e.g. meta-llama/Llama-3.1-8B-Instruct or llama3.1:8b)"
                )
        for adapter in self.lora_adapters:
            if "/" in adapter:
                raise SpecError(
                    f"{what} LoRA adapter {adapter!r} is not valid: an adapter is one directory "
                    "under the LoRA root; use letters, digits, '.', '_' and '-' (no '/')"
                )
            check_model_name(adapter, f"{what} LoRA adapter")
        return self

    @property
    def client_model_name(self) -> str:
        return self.served_model_name or self.model.rstrip("/").split("/")[-1]

    @property
    def model_names(self) -> tuple[str, ...]:
        """Every name a client may put in `model` to reach this pool."""
        return (self.client_model_name, *self.aliases, *self.lora_adapters)


class NodeSpec(SpecModel):
    gpu: str = "h100_sxm"
    gpus_per_node: int = Field(default=8, gt=0)
    count: int = Field(default=1, gt=0)


class StackSpec(SpecModel):
    version: Literal[1] = 1
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    engine: EngineKind = "simulated"
    nodes: tuple[NodeSpec, ...] = ()
    pools: tuple[PoolSpec, ...] = Field(min_length=1)
    gateway: dict[str, Any] = Field(default_factory=dict, description="see docs/gateway.md")
    workloads: tuple[WorkloadSpec, ...] = Field(
        default=(), description="the workloads a plan sized the stack for (docs/stack.md)"
    )
    triggers: tuple[Trigger, ...] = Field(
        default=(), description="the plan's re-plan triggers; render makes them ticket alerts"
    )
    observability: ObservabilitySpec = Field(
        default_factory=ObservabilitySpec, description="see docs/render.md (observability)"
    )

    @model_validator(mode="after")
    def _check_references(self) -> StackSpec:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        served: dict[str, str] = {}
        for pool in self.pools:
            for ref, field in ((pool.long_pool, "long_pool"), (pool.fallback, "fallback")):
                if ref is not None and ref not in names:
                    raise ValueError(
                        f"pool {pool.name!r}: {field} {ref!r} is not a pool; pools: {names}"
                    )
            if pool.long_pool is not None and pool.long_prompt_tokens is None:
                raise ValueError(
                    f"pool {pool.name!r}: long_pool needs long_prompt_tokens (the length rule)"
                )
            for ref, field in ((pool.long_pool, "long_pool"), (pool.fallback, "fallback")):
                if ref == pool.name:
                    raise ValueError(
                        f"pool {pool.name!r}: {field} names the pool itself, so no other pool "
                        f"ever takes its traffic; name another pool or remove {field}"
                    )
            if self.engine_of(pool) == "url" and len(pool.urls) != pool.replicas:
                raise ValueError(
                    f"pool {pool.name!r}: engine 'url' needs one entry in urls per replica "
                    f"({pool.replicas}), got {len(pool.urls)}"
                )
            if pool.weights is not None and self.engine_of(pool) in ("url", "sglang"):
                raise ValueError(
                    f"pool {pool.name!r}: `weights` needs an engine inhouse starts (simulated or "
                    f"vllm); a {self.engine_of(pool)!r} pool's server verifies its own weights"
                )
            if pool.gpu_ids and len(pool.gpu_ids) != pool.replicas:
                raise ValueError(f"pool {pool.name!r}: gpu_ids needs one group per replica")
            for ids in pool.gpu_ids:
                if len(ids) != pool.tp:
                    raise ValueError(
                        f"pool {pool.name!r}: each gpu_ids group needs tp={pool.tp} GPUs"
                    )
            for name in pool.model_names:
                if name in served and served[name] != pool.name:
                    raise ValueError(
                        f"model name {name!r} is served by both {served[name]!r} and "
                        f"{pool.name!r}; give one a different served_model_name"
                    )
                served[name] = pool.name
        self._check_workloads(names, served)
        return self

    def _check_workloads(self, pools: list[str], served: dict[str, str]) -> None:
        names = [w.name for w in self.workloads]
        if len(set(names)) != len(names):
            raise ValueError(f"workload names must be unique, got {names}")
        for workload in self.workloads:
            if workload.model not in served:
                raise ValueError(
                    f"workload {workload.name!r}: model {workload.model!r} is not served by any "
                    f"pool; served names: {sorted(served)}"
                )
        for trigger in self.triggers:
            if trigger.pool not in pools:
                raise ValueError(
                    f"trigger {trigger.change!r}: pool {trigger.pool!r} is not a pool; "
                    f"pools: {pools}"
                )

    def engine_of(self, pool: PoolSpec) -> EngineKind:
        return pool.engine or self.engine

    def pool(self, name: str) -> PoolSpec:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)

    def pool_of_workload(self, workload: WorkloadSpec) -> PoolSpec:
        """The pool clients reach by the workload's model name."""
        pool = self.pool_for_model(workload.model)
        assert pool is not None, "validated: every workload's model is served"
        return pool

    def workloads_on(self, pool: PoolSpec) -> list[WorkloadSpec]:
        """The workloads whose model name this pool serves."""
        return [w for w in self.workloads if w.model in pool.model_names]

    def length_chain(self, pool: PoolSpec, model: str | None = None) -> list[PoolSpec]:
        """`pool`, then each `long_pool` its longer prompts go on to (each pool once): the
        pools the length rule can send a request for `model` to; `pool` alone for one of its
        LoRA adapters, which the long pool does not carry (`inhouse.routing.pools`)."""
        out = [pool]
        if model is not None and model in pool.lora_adapters:
            return out
        while pool.long_pool is not None and pool.long_pool not in {p.name for p in out}:
            pool = self.pool(pool.long_pool)
            out.append(pool)
        return out

    def pools_of_model(self, model: str) -> list[PoolSpec]:
        """Every pool that serves requests naming `model` by the length rule (`length_chain`
        from the pool serving the name); none for a name no pool serves."""
        pool = self.pool_for_model(model)
        return [] if pool is None else self.length_chain(pool, model)

    def workloads_served_by(self, pool: PoolSpec) -> list[WorkloadSpec]:
        """The workloads whose requests this pool serves (fallback aside): those naming its
        model, and those whose long prompts its pool's length rule sends here."""
        return [
            w for w in self.workloads if pool.name in {p.name for p in self.pools_of_model(w.model)}
        ]

    def fallback_primaries(self, pool: PoolSpec) -> list[PoolSpec]:
        """The pools naming this one their `fallback` (never itself: the stack refuses that)."""
        return [p for p in self.pools if p.fallback == pool.name]

    def workloads_failing_over_to(self, pool: PoolSpec) -> list[WorkloadSpec]:
        """The workloads whose requests come to this pool during a failover: those served by
        the pools naming it their `fallback` (one hop: the gateway does not follow a fallback's
        own `fallback`, `inhouse.routing.pools`)."""
        primaries = {p.name for p in self.fallback_primaries(pool)}
        return [
            w for w in self.workloads if primaries & {p.name for p in self.pools_of_model(w.model)}
        ]

    def planned_e2e_ms(self, pool: PoolSpec) -> float | None:
        """The longest p95 end-to-end latency (ms) the plan simulated for the requests `pool`
        serves, what its drain must wait for; None when no workload it serves states one
        (hand-written). On a workload's own pool, its `planned_p95.e2e_ms`; on a long pool its
        long prompts reach, their `long_e2e_ms`, else (a stack of an older plan) a bound on the
        pool's longest request: a prompt just over the length rule and output up to the pool's
        `knobs.max_model_len`, at the long prompts' TTFT target and the ITL target, at least
        `e2e_ms`."""
        found = []
        for workload in self.workloads_served_by(pool):
            planned = workload.planned_p95
            if planned.e2e_ms is None:
                continue
            if self.pool_of_workload(workload).name == pool.name:
                found.append(planned.e2e_ms)
            elif planned.long_e2e_ms is not None:  # its long prompts
                found.append(planned.long_e2e_ms)
            else:
                found.append(max(planned.e2e_ms, self._long_bound_ms(workload, pool) or 0.0))
        return max(found, default=None)

    def _long_bound_ms(self, workload: WorkloadSpec, pool: PoolSpec) -> float | None:
        """The long prompts' longest e2e on `pool` (`planned_e2e_ms`); None when the pool has
        no max_model_len or the workload no ITL target."""
        chain = self.pools_of_model(workload.model)
        before = chain[[p.name for p in chain].index(pool.name) - 1]
        slo, max_len = workload.slo, pool.knobs.max_model_len
        ttft_ms = slo.long_ttft_p95_ms or slo.ttft_p95_ms or 0.0
        if max_len is None or slo.itl_p95_ms is None or before.long_prompt_tokens is None:
            return None
        return ttft_ms + max(0, max_len - before.long_prompt_tokens) * slo.itl_p95_ms

    def pool_for_model(self, model: str) -> PoolSpec | None:
        for pool in self.pools:
            if model in pool.model_names:
                return pool
        return None


def parse_stack(data: Any, source: str = "stack") -> StackSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a stack file is a YAML mapping with `version`, `name`, `pools`")
    version = data.get("version", STACK_VERSION)
    if version != STACK_VERSION:
        raise SpecError(
            f"{source}: version: {version!r} is not supported; this inhouse reads version "
            f"{STACK_VERSION}"
        )
    try:
        stack = StackSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(describe_validation_error(exc, source)) from exc
    # The gateway section is typed where it is used (`parse_gateway`); checked here too, its
    # errors name this file, and a command that ignores the gateway (`render`, `simulate`)
    # does not pass over a misspelled tenant limit in silence or name the file "stack".
    parse_gateway(stack.gateway, source)
    return stack


def parse_stack_text(text: str, source: str) -> StackSpec:
    """A stack file's text as a typed stack; `source` (its path) names it in errors. The file
    itself is read by `inhouse.spec.load.load_stack`."""
    return parse_stack(load_yaml(text, source), source)


def dump_stack(stack: StackSpec) -> str:
    data = stack.model_dump(mode="json", exclude_defaults=True)
    data = {"version": STACK_VERSION, **data}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)

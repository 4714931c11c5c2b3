"""What render refuses before it writes anything: a pool that would not start, or not schedule,
on the cluster the stack names.

The stack file's own checks (`inhouse.spec.stack`) hold for every command; these are the ones
that matter once the pool is a vLLM Deployment: the routing policy the gateway will build, the
GPUs a node has for the pool's TP group, the GPU indices a replica is pinned to, the `vllm
serve` values vLLM's own parser refuses, and, for a model in the catalog, whether the weights
and one `max_model_len` sequence fit the pool's GPUs (the engine's memory rule, the one the
planner and the simulator use). Each error names the pool, the field and the fix.
"""

from __future__ import annotations

from inhouse.engine.build import build_replica
from inhouse.errors import DoesNotFitError, SpecError
from inhouse.fleet import replica_spec_for_pool
from inhouse.launch.vllm_checks import check_vllm_values
from inhouse.render.layout import EngineLayout
from inhouse.routing.framework import PolicyContext
from inhouse.routing.registry import make_policy
from inhouse.spec.catalog import get_gpu, get_model
from inhouse.spec.stack import NodeSpec, PoolSpec, StackSpec

# Routing policies that exist only in the simulator (they read the engines' caches).
SIMULATOR_ONLY_POLICIES = ("oracle",)


def check_renderable(stack: StackSpec, engines: EngineLayout) -> None:
    """Raise a `SpecError` (or `DoesNotFitError`) for the first pool that cannot run as
    rendered."""
    for pool in stack.pools:
        _check_routing(pool)
    for pool in engines.pools:
        _check_service_names(pool)
        _check_gpus(stack, engines, pool)
        check_vllm_values(pool)
        _check_fit(pool)
    if engines.single_node:
        _check_gpu_ids(stack, engines)


def _check_routing(pool: PoolSpec) -> None:
    policy = pool.routing.policy
    if policy in SIMULATOR_ONLY_POLICIES:
        raise SpecError(
            f"pool {pool.name!r}: routing.policy {policy!r} reads the engines' caches and "
            "exists only in the simulator; use cache_aware in a rendered stack"
        )
    try:
        make_policy(policy, PolicyContext(num_replicas=pool.replicas), pool.routing.params)
    except SpecError as exc:
        raise SpecError(f"pool {pool.name!r}: {exc}") from None


def _nodes_of(stack: StackSpec, pool: PoolSpec) -> list[NodeSpec]:
    gpu = get_gpu(pool.gpu)
    return [node for node in stack.nodes if get_gpu(node.gpu) == gpu]


def _check_gpus(stack: StackSpec, engines: EngineLayout, pool: PoolSpec) -> None:
    """The pool's TP group fits one node of its GPU type, and the nodes hold its replicas."""
    gpu = get_gpu(pool.gpu)
    if not stack.nodes:
        per_node = gpu.gpus_per_node
        if pool.tp > per_node:
            raise SpecError(
                f"pool {pool.name!r}: tp={pool.tp} is more GPUs than a {gpu.name} node has "
                f"({per_node}); a TP group runs on one node: lower tp, or add `nodes` with "
                "gpus_per_node of at least tp"
            )
        return
    nodes = _nodes_of(stack, pool)
    if not nodes:
        have = sorted({get_gpu(n.gpu).name for n in stack.nodes})
        raise SpecError(
            f"pool {pool.name!r}: gpu {gpu.name!r} is on none of the stack's nodes "
            f"({', '.join(have)}); its pods would stay Pending: set the pool's gpu to a node's, "
            "or add such nodes"
        )
    per_node = max(n.gpus_per_node for n in nodes)
    if pool.tp > per_node:
        raise SpecError(
            f"pool {pool.name!r}: tp={pool.tp} is more GPUs than a {gpu.name} node has "
            f"({per_node}); a TP group runs on one node: lower tp to at most {per_node}"
        )
    total = sum(n.count * n.gpus_per_node for n in nodes)
    needed = sum(p.tp * p.replicas for p in engines.pools if get_gpu(p.gpu) == gpu)
    if needed > total:
        raise SpecError(
            f"pool {pool.name!r}: the pools on {gpu.name} need {needed} GPUs at their minimum "
            f"replicas (tp x replicas), the nodes have {total}; lower replicas or tp, or add "
            "nodes"
        )


def _check_service_names(pool: PoolSpec) -> None:
    """The pool's Services are named after it (`<pool>-engine`, `<pool>-r<i>`), and a Service
    name is a DNS-1035 label: the API server refuses one that starts with a digit."""
    if not pool.name[0].isalpha():
        raise SpecError(
            f"pool {pool.name!r}: its Kubernetes Services are named after it "
            f"({pool.name}-engine), and Service names must start with a letter; rename the "
            f"pool, e.g. to 'llm-{pool.name}'"
        )


def _check_fit(pool: PoolSpec) -> None:
    """The catalog's memory rule: weights, activations and one `max_model_len` sequence of KV
    (the model's whole context when the knob is unset, as vLLM serves it) fit each of the
    pool's GPUs at its gpu_memory_utilization (vLLM checks the same at start). A model outside
    the catalog is not sized here."""
    try:
        model = get_model(pool.model)
    except SpecError:
        return
    max_len = pool.knobs.max_model_len
    if max_len is not None and max_len > model.max_context:
        raise SpecError(
            f"pool {pool.name!r}: knobs.max_model_len {max_len} is longer than {model.name}'s "
            f"context ({model.max_context} tokens), which vLLM refuses at start; lower it to "
            f"at most {model.max_context}"
        )
    try:
        replica = build_replica(replica_spec_for_pool(pool))
    except DoesNotFitError as exc:
        raise DoesNotFitError(
            f"pool {pool.name!r} ({pool.model}, {pool.quant}, tp={pool.tp} on {pool.gpu}) does "
            f"not fit: {exc}"
        ) from None
    except SpecError as exc:
        raise SpecError(f"pool {pool.name!r}: {exc}") from None
    kv_tokens = replica.memory.kv_tokens
    if max_len is None and kv_tokens < model.max_context:
        # NOTE: the simulator runs such a pool (no request is that long); vLLM does not start.
        raise SpecError(
            f"pool {pool.name!r}: without knobs.max_model_len vLLM serves {model.name}'s whole "
            f"{model.max_context}-token context, and refuses to start unless one such sequence "
            f"fits the KV cache, which holds {kv_tokens:,} tokens of KV here ({pool.quant}, "
            f"tp={pool.tp} on {pool.gpu}); set knobs.max_model_len to at most {kv_tokens}, or "
            "give the pool more memory (tp, a lower-bit quant or kv_cache_dtype fp8)"
        )


def _check_gpu_ids(stack: StackSpec, engines: EngineLayout) -> None:
    """On one node, every pinned GPU index exists and no two replicas share one."""
    taken: dict[int, str] = {}
    for unit in engines.units:
        pool = unit.pool
        nodes = _nodes_of(stack, pool)
        per_node = nodes[0].gpus_per_node if nodes else get_gpu(pool.gpu).gpus_per_node
        for gpu_id in unit.gpu_ids:
            if not 0 <= gpu_id < per_node:
                raise SpecError(
                    f"pool {pool.name!r}: gpu_ids has GPU {gpu_id}, but the node has GPUs "
                    f"0..{per_node - 1}; use indices `inhouse check topology` lists"
                )
            if gpu_id in taken:
                raise SpecError(
                    f"pool {pool.name!r}: {unit.name} and {taken[gpu_id]} are both pinned to "
                    f"GPU {gpu_id}; give each replica its own GPUs in gpu_ids"
                )
            taken[gpu_id] = unit.name

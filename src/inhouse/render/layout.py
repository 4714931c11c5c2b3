"""Where each engine runs and what it needs: the facts every rendered artifact shares.

A single-node stack (one node, or no `nodes` given) gets a static layout: one StatefulSet per
pool, named `<pool>`, whose pod `<pool>-<i>` is replica i on the GPU group `gpu_ids[i]` and has a
Service of the same name (the replica's stable address). A StatefulSet's RollingUpdate replaces
one pod at a time and waits for it to be Ready, so a changed pod template never takes the whole
pool down. A multi-node stack gets one Deployment per pool that KEDA scales between the pool's
`replicas` and what the nodes' GPUs allow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inhouse.errors import SpecError
from inhouse.launch.engine_args import LORA_ROOT
from inhouse.perf.memory import weight_bytes
from inhouse.spec.base import MAX_REPLICAS
from inhouse.spec.catalog import ModelSpec, get_gpu, get_model
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.quant import normalize_quant
from inhouse.spec.stack import PoolSlo, PoolSpec, StackSpec
from inhouse.spec.weights import BY_DIGEST_DIR, by_name_path

# NVML product names, as dcgm-exporter's `modelName` label shows them; GPU feature discovery
# labels nodes `nvidia.com/gpu.product` with the same name, spaces turned into dashes.
NVML_PRODUCT_NAMES: dict[str, str] = {
    "h100_sxm": "NVIDIA H100 80GB HBM3",
    "h100_pcie": "NVIDIA H100 PCIe",
    "h200_sxm": "NVIDIA H200",
    "b200_sxm": "NVIDIA B200",
    "a100_sxm_80gb": "NVIDIA A100-SXM4-80GB",
    "a100_pcie_80gb": "NVIDIA A100 80GB PCIe",
    "h20": "NVIDIA H20",
    "l40s": "NVIDIA L40S",
    "l4": "NVIDIA L4",
}

# The node's model cache (hostPath) is mounted here; LoRA adapters live under it.
MODELS_MOUNT = "/models"
assert LORA_ROOT.startswith(MODELS_MOUNT + "/"), "LoRA adapters must sit in the model cache"
# `inhouse weights pull --cache` of a pool whose weights come from the registry (in the pod).
REGISTRY_CACHE = f"{MODELS_MOUNT}/registry"

# Model-load window for the startupProbe: read the 16-bit checkpoint (the worst case: an FP8
# pool may quantize a bf16 checkpoint at load) at a conservative single-stream NVMe rate, add
# vLLM's start-up work (torch.compile, CUDA-graph capture, KV profiling), double it, and never
# go below the seeds' 10 minutes.
NVME_READ_BYTES_S = 2e9
ENGINE_INIT_S = 180
MIN_STARTUP_WINDOW_S = 600
UNKNOWN_MODEL_STARTUP_WINDOW_S = 1800
PROBE_PERIOD_S = 10
# After a replaced pod's startupProbe passes: one readiness probe (PROBE_PERIOD_S), a discovery
# refresh (Prometheus's DNS service discovery: 30 s) and a scrape (15 s), rounded up.
ROLLOUT_MARGIN_S = 60
# Grace after vLLM's drain for the engine to stop its workers and close the port.
TEARDOWN_MARGIN_S = 15

# Defaults for a pool without `slo`: the seeds' interactive chat row (TTFT p95 < 800 ms paging at
# 1 s, ITL p95 < 60 ms paging at 80 ms, 99.9% of requests without a 5xx).
DEFAULT_SLO = PoolSlo(ttft_p95_ms=800, ttft_alarm_ms=1000, itl_p95_ms=60, itl_alarm_ms=80)
# Queue depth (waiting requests per replica) above which KEDA adds a replica and, sustained,
# a ticket is filed: the seeds' "vllm:num_requests_waiting > 20 for 60s".
QUEUE_DEPTH_PER_REPLICA = 20


@dataclass(frozen=True, slots=True)
class EngineUnit:
    """A static replica on a fixed GPU group (`name` is its pod and its Service, `<pool>-<i>`,
    in the pool's StatefulSet), or a pool's scaled set (`name` is its Deployment)."""

    pool: PoolSpec
    name: str
    replica_index: int | None
    replicas: int
    gpu_ids: tuple[int, ...]

    @property
    def workload(self) -> str:
        """The StatefulSet (static) or Deployment (scaled) that runs it: named after the pool."""
        return self.pool.name


# The label the StatefulSet controller puts on each of its pods (every Kubernetes version):
# what a static replica's Service, the drills and the scrape's relabelling select a replica by.
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"


def replica_pod(pool: str, index: int) -> str:
    """Static replica `index` of `pool`: its StatefulSet pod's name, and its Service's."""
    return f"{pool}-{index}"


def pool_selector(pool: str) -> str:
    """A kubectl label selector for every engine pod of `pool` (static or scaled)."""
    return f"inhouse.dev/pool={pool}"


def replica_selector(pool: str, index: int) -> str:
    """A kubectl label selector for static replica `index` of `pool`'s pod. A scaled pool's
    pods (a Deployment's) have no such label: nothing tells one of them from another (the
    drills label the one they choose: `inhouse.drill.victim`)."""
    return f"{pool_selector(pool)},{POD_NAME_LABEL}={replica_pod(pool, index)}"


def is_single_node(stack: StackSpec) -> bool:
    return sum(node.count for node in stack.nodes) <= 1


def engine_pools(stack: StackSpec) -> list[PoolSpec]:
    """Pools that render runs as vLLM Deployments (`url` pools are attached, not run)."""
    pools = []
    for pool in stack.pools:
        if stack.engine_of(pool) == "url":
            continue
        if pool.backend != "vllm":
            raise SpecError(
                f"pool {pool.name!r}: render writes vLLM engines, but backend is "
                f"{pool.backend!r}; run it yourself and attach it with engine: url"
            )
        pools.append(pool)
    return pools


def engine_units(stack: StackSpec) -> list[EngineUnit]:
    return _units(engine_pools(stack), is_single_node(stack))


def _units(pools: list[PoolSpec], static: bool) -> list[EngineUnit]:
    units = []
    for pool in pools:
        if not static:
            units.append(EngineUnit(pool, pool.name, None, pool.replicas, ()))
            continue
        for index in range(pool.replicas):
            ids = pool.gpu_ids[index] if pool.gpu_ids else ()
            units.append(EngineUnit(pool, replica_pod(pool.name, index), index, 1, ids))
    return units


@dataclass(frozen=True, slots=True)
class EngineLayout:
    """Where a stack's engines run: derived once per render (`engine_layout`) and passed to
    every renderer that places, scrapes, alerts on or charts them."""

    single_node: bool
    pools: tuple[PoolSpec, ...]  # the pools render runs as vLLM engines
    units: tuple[EngineUnit, ...]

    def units_of(self, pool: PoolSpec) -> list[EngineUnit]:
        return [u for u in self.units if u.pool.name == pool.name]


def engine_layout(stack: StackSpec) -> EngineLayout:
    pools, static = engine_pools(stack), is_single_node(stack)
    return EngineLayout(static, tuple(pools), tuple(_units(pools, static)))


def nvml_name(gpu: str) -> str:
    spec = get_gpu(gpu)
    if spec.name not in NVML_PRODUCT_NAMES:
        raise SpecError(
            f"GPU {gpu!r}: render targets NVIDIA GPUs (nvidia.com/gpu, DCGM); known: "
            f"{', '.join(sorted(NVML_PRODUCT_NAMES))}"
        )
    return NVML_PRODUCT_NAMES[spec.name]


def gpu_product_label(gpu: str) -> str:
    """The `nvidia.com/gpu.product` node label value GPU feature discovery sets."""
    return nvml_name(gpu).replace(" ", "-")


def model_dir(pool: PoolSpec) -> str:
    """Where the pool's weights sit inside the pod: for weights from the registry, their
    verified path in the node's cache (`/models/registry/by-name/<name>/<revision>`, or
    `/models/registry/sha256/<hex>` when the digest is pinned); else
    `/models/<org>/<name>` for a Hugging Face id, `/models/<basename>` for a local directory."""
    weights = pool.weights
    if weights is not None and weights.registry is not None:
        assert weights.name is not None, "checked by the stack's schema"
        if weights.revision is None:
            raise SpecError(
                f"pool {pool.name!r}: weights.revision is required to render Kubernetes "
                "manifests (every pod, now and after a restart, must load the same bytes); pin "
                "the revision `inhouse weights ls` shows"
            )
        if weights.digest is not None:  # what the pull verified; a by-name link can move
            return f"{REGISTRY_CACHE}/{BY_DIGEST_DIR}/{weights.digest.partition(':')[2]}"
        return f"{REGISTRY_CACHE}/{by_name_path(weights.name, weights.revision)}"
    name = pool.model.rstrip("/")
    relative = name.split("/")[-1] if name.startswith(("/", ".")) else name
    return f"{MODELS_MOUNT}/{relative}"


def lora_dir(adapter: str) -> str:
    """Where `inhouse.launch.engine_args` tells vLLM to find a LoRA adapter."""
    return f"{LORA_ROOT}/{adapter}"


def slo_of(pool: PoolSpec) -> PoolSlo:
    return pool.slo or DEFAULT_SLO


def startup_window_s(pool: PoolSpec) -> tuple[int, str]:
    """Seconds the startupProbe waits for the model to load, and the arithmetic behind it."""
    try:
        model = get_model(pool.model)
    except SpecError:
        return UNKNOWN_MODEL_STARTUP_WINDOW_S, (
            f"model {pool.model} is not in the catalog: {UNKNOWN_MODEL_STARTUP_WINDOW_S} s"
        )
    checkpoint = checkpoint_bytes(model)
    load_s = checkpoint / NVME_READ_BYTES_S + ENGINE_INIT_S
    window = max(MIN_STARTUP_WINDOW_S, math.ceil(2 * load_s / PROBE_PERIOD_S) * PROBE_PERIOD_S)
    why = (
        f"2 x ({checkpoint / 1e9:.0f} GB checkpoint / {NVME_READ_BYTES_S / 1e9:.0f} GB/s NVMe "
        f"+ {ENGINE_INIT_S} s engine init) = {2 * load_s:.0f} s, at least "
        f"{MIN_STARTUP_WINDOW_S} s -> {window} s"
    )
    return window, why


def checkpoint_bytes(model: ModelSpec) -> float:
    """The 16-bit checkpoint: the worst case (an FP8 pool may quantize a bf16 one at load)."""
    return weight_bytes(model, normalize_quant("bf16"))


def checkpoint_read_s(model: ModelSpec) -> int:
    """Seconds to read (or hash) the checkpoint once at the conservative NVMe rate."""
    return math.ceil(checkpoint_bytes(model) / NVME_READ_BYTES_S)


def verify_read_s(pool: PoolSpec) -> int:
    """Seconds the init containers take to hash the checkpoint (model-signing verify), at the
    same conservative NVMe rate; 0 for a model not in the catalog (its window is generous)."""
    try:
        model = get_model(pool.model)
    except SpecError:
        return 0
    return checkpoint_read_s(model)


def rollout_allowance_s(
    stack: StackSpec, engines: EngineLayout, pool: PoolSpec, prestop_sleep_s: int, dns_ttl_s: int
) -> tuple[int, str]:
    """How long a rolling update may keep one of the pool's replicas out of the scrape, and the
    arithmetic. Neither a StatefulSet nor a Deployment at maxSurge 0 surges: the new pod waits
    for the old one's GPUs, so: the old pod's
    terminationGracePeriodSeconds, the init containers' verify pass, the startupProbe window
    (past it the kubelet restarts the container: no longer a rollout) and a margin for the
    readiness probe and the scrape to find the pod again."""
    is_scaled = any(unit.replica_index is None for unit in engines.units_of(pool))
    prestop_s, _ = engine_prestop_s(stack, is_scaled, prestop_sleep_s, dns_ttl_s)
    grace_s, _ = termination_grace_s(stack, pool, prestop_s)
    verify_s = verify_read_s(pool)
    window_s, _ = startup_window_s(pool)
    total = grace_s + verify_s + window_s + ROLLOUT_MARGIN_S
    return total, (
        f"{total} s = the old pod's terminationGracePeriodSeconds {grace_s} s + {verify_s} s "
        f"verifying the weights + the startupProbe window {window_s} s + {ROLLOUT_MARGIN_S} s "
        "for readiness and the scrape to find the new pod"
    )


def planned_e2e_s(stack: StackSpec, pool: PoolSpec | None = None) -> float | None:
    """The longest p95 end-to-end latency the plan simulated for the requests `pool` serves
    (every pool's when None), in seconds, long prompts on a long pool included
    (`StackSpec.planned_e2e_ms`); None when the stack states none (hand-written)."""
    pools = stack.pools if pool is None else (pool,)
    found = [e2e for p in pools if (e2e := stack.planned_e2e_ms(p)) is not None]
    return max(found) / 1000 if found else None


def inflight_s(stack: StackSpec, pool: PoolSpec) -> tuple[int, str]:
    """How long a terminating replica keeps serving what it has: vLLM's drain
    (`--shutdown-timeout`), at least the plan's p95 e2e of the pool's workloads (a request that
    arrived just before the drain needs that long)."""
    drain = pool.knobs.shutdown_timeout_s
    e2e = planned_e2e_s(stack, pool)
    if e2e is None:
        return drain, f"vLLM drain --shutdown-timeout {drain} s"
    seconds = max(drain, math.ceil(e2e))
    return seconds, (
        f"max(vLLM drain --shutdown-timeout {drain} s, the plan's p95 e2e {e2e:.1f} s) = "
        f"{seconds} s in flight"
    )


def gateway_inflight_s(stack: StackSpec) -> int:
    """How long the gateway, and the edge in front of it, still stream what they have when
    told to stop: the longest of the gateway's drain (`proxy.drain_timeout_s`), the engines'
    and the plan's p95 e2e of any workload."""
    drain = float(parse_gateway(stack.gateway).proxy.drain_timeout_s)
    engines = max(p.knobs.shutdown_timeout_s for p in stack.pools)
    e2e = planned_e2e_s(stack) or 0.0
    return math.ceil(max(drain, engines, e2e))


# After the DNS TTL and one discovery interval, a margin for the lookup itself.
DISCOVERY_MARGIN_S = 5


def engine_prestop_s(
    stack: StackSpec, is_scaled: bool, prestop_sleep_s: int, dns_ttl_s: int
) -> tuple[int, str]:
    """The engine pod's preStop sleep, and why. A static replica is reached through its own
    Service, which drops the pod from its endpoints at once. A scaled pool's pods are found by
    the gateway's DNS lookups of a headless Service, every `gateway.discovery.interval_s`, and
    the cluster's DNS answers from its cache for up to the records' TTL: the gateway can still
    send new requests to a terminating pod for the TTL plus one interval, so the sleep covers
    that before SIGTERM starts vLLM's drain (where new requests get 500)."""
    if not is_scaled:
        return prestop_sleep_s, f"preStop sleep {prestop_sleep_s} s"
    interval_s = math.ceil(parse_gateway(stack.gateway).discovery.interval_s)
    needed = dns_ttl_s + interval_s + DISCOVERY_MARGIN_S
    if needed <= prestop_sleep_s:
        return prestop_sleep_s, f"preStop sleep {prestop_sleep_s} s"
    return needed, (
        f"preStop sleep {needed} s (DNS TTL {dns_ttl_s} s + discovery every {interval_s} s "
        f"+ {DISCOVERY_MARGIN_S} s: the gateway finds this pool's pods by DNS)"
    )


def termination_grace_s(stack: StackSpec, pool: PoolSpec, prestop_sleep_s: int) -> tuple[int, str]:
    """preStop sleep (the drain from the load balancers) + what is in flight + teardown, and
    the arithmetic."""
    inflight, why = inflight_s(stack, pool)
    grace = prestop_sleep_s + inflight + TEARDOWN_MARGIN_S
    return grace, (
        f"{grace} = preStop sleep {prestop_sleep_s} s + {why} + {TEARDOWN_MARGIN_S} s teardown"
    )


def shm_gib(pool: PoolSpec) -> int:
    """/dev/shm for vLLM's worker message queues and NCCL's host-side buffers."""
    return 8 if pool.tp > 1 else 2


def memory_gib(pool: PoolSpec) -> int:
    """Container memory: a 16 GiB base, 8 GiB per GPU worker, the host KV tier, and /dev/shm
    (a memory-backed emptyDir is charged to the container)."""
    return math.ceil(16 + 8 * pool.tp + pool.knobs.host_kv_gib + shm_gib(pool))


def cpu_cores(pool: PoolSpec) -> int:
    """One core per GPU worker plus the API server, engine core and tokenizer threads."""
    return 2 * pool.tp + 2


def max_replicas(stack: StackSpec, engines: EngineLayout, pool: PoolSpec) -> int:
    """Most replicas the nodes' GPUs of this type hold, after every other pool's minimum."""
    gpus = sum(
        n.count * n.gpus_per_node for n in stack.nodes if get_gpu(n.gpu) == get_gpu(pool.gpu)
    )
    others = sum(
        p.tp * p.replicas
        for p in engines.pools
        if p.name != pool.name and get_gpu(p.gpu) == get_gpu(pool.gpu)
    )
    return max(pool.replicas, min((gpus - others) // pool.tp, MAX_REPLICAS))

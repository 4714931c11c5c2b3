"""Engine command lines rendered from the stack file: pure functions, no I/O.

* `vllm_serve_args(stack, pool, replica_index, port)`: the arguments that follow `vllm serve`
  for one replica of a pool (the model first, then flags). `up` runs them; `render` puts them in
  Kubernetes manifests. Knobs are rendered when they differ from vLLM's defaults or were set
  explicitly in the stack; `knobs.extra_args` come last, so they win.
* `simulated_engine_args(...)`: the arguments that follow `inhouse engine`, the same replica
  simulated.
* `replica_env(pool, replica_index)`: environment for the replica (`CUDA_VISIBLE_DEVICES` from
  `gpu_ids`, and `VLLM_HTTP_TIMEOUT_KEEP_ALIVE`: see `ENGINE_KEEP_ALIVE_S`).
* `replica_ports(stack, base_port)`: one port per replica of every pool that `up` launches.

Conventions: quantization `fp8` renders `--quantization fp8` (online FP8 of a 16-bit checkpoint);
other schemes are read by vLLM from a pre-quantized checkpoint's config, so nothing is rendered.
LoRA adapters are served from `LORA_ROOT/<name>`. `--enable-prompt-tokens-details` is always on,
so `usage.prompt_tokens_details.cached_tokens` reports prefix-cache hits to clients.
"""

from __future__ import annotations

from inhouse.spec.stack import PoolSpec, StackSpec

LORA_ROOT = "/models/lora"
ATTACHED_KINDS = ("url", "sglang")  # engines `up` attaches to rather than launches
DEFAULT_ENGINE_BASE_PORT = 8100
# How long an engine keeps an idle HTTP connection (vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s by
# default, which the simulated engine honours too): longer than the gateway keeps its idle
# connections to the engines (`proxy.upstream_idle_s`, 60 s), so a burst reuses them instead of
# paying a connect on each request's path.
ENGINE_KEEP_ALIVE_S = 75
KEEP_ALIVE_ENV = "VLLM_HTTP_TIMEOUT_KEEP_ALIVE"


def _served_names(pool: PoolSpec) -> list[str]:
    return [pool.client_model_name, *pool.aliases]


def _fmt(value: float) -> str:
    """Numbers as a user would type them: 0.9, 16, 1.5 (no trailing .0 on integers)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def vllm_serve_args(
    stack: StackSpec,
    pool: PoolSpec,
    replica_index: int,
    port: int,
    host: str = "0.0.0.0",
    model: str | None = None,
) -> list[str]:
    """Arguments after `vllm serve` for replica `replica_index` of `pool`, listening on `port`.
    `model` replaces `pool.model` as the path vLLM loads (the pool's verified weights)."""
    assert 0 <= replica_index < pool.replicas, f"pool {pool.name} has {pool.replicas} replicas"
    knobs = pool.knobs
    explicit = knobs.model_fields_set
    args = [model or pool.model, "--served-model-name", *_served_names(pool)]
    args += ["--host", host, "--port", str(port)]
    if pool.tp > 1:
        args += ["--tensor-parallel-size", str(pool.tp)]
    if pool.quant.lower() in ("fp8", "fp8_e4m3"):
        args += ["--quantization", "fp8"]
    for flag, value in (
        ("--max-model-len", knobs.max_model_len),
        ("--max-num-seqs", knobs.max_num_seqs),
        ("--max-num-batched-tokens", knobs.max_num_batched_tokens),
    ):
        if value is not None:
            args += [flag, str(value)]
    args += ["--gpu-memory-utilization", _fmt(knobs.gpu_memory_utilization)]
    args.append("--enable-prefix-caching" if knobs.enable_prefix_caching else
                "--no-enable-prefix-caching")  # fmt: skip
    if not knobs.enable_chunked_prefill:
        args.append("--no-enable-chunked-prefill")
    args += ["--scheduling-policy", knobs.scheduling_policy]
    if "block_size" in explicit:
        args += ["--block-size", str(knobs.block_size)]
    if knobs.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", knobs.kv_cache_dtype]
    if knobs.host_kv_gib > 0:
        args += ["--kv-offloading-size", _fmt(knobs.host_kv_gib)]
        args += ["--kv-offloading-backend", "native"]
    if pool.lora_adapters:
        args += ["--enable-lora", "--max-loras", str(len(pool.lora_adapters))]
        args += ["--lora-modules", *(f"{n}={LORA_ROOT}/{n}" for n in pool.lora_adapters)]
    args += ["--shutdown-timeout", str(knobs.shutdown_timeout_s)]
    args.append("--enable-prompt-tokens-details")
    args += list(knobs.extra_args)
    return args


def simulated_engine_args(
    stack: StackSpec, pool: PoolSpec, replica_index: int, port: int, host: str = "127.0.0.1"
) -> list[str]:
    """Arguments after `inhouse engine` for the same replica, simulated. `extra_args` are
    vLLM's and are not passed."""
    assert 0 <= replica_index < pool.replicas, f"pool {pool.name} has {pool.replicas} replicas"
    knobs = pool.knobs
    args = ["--model", pool.model, "--served-model-name", *_served_names(pool)]
    args += ["--gpu", pool.gpu, "--tp", str(pool.tp), "--quant", pool.quant]
    args += ["--backend", pool.backend, "--host", host, "--port", str(port)]
    for flag, value in (
        ("--max-model-len", knobs.max_model_len),
        ("--max-num-seqs", knobs.max_num_seqs),
        ("--max-num-batched-tokens", knobs.max_num_batched_tokens),
    ):
        if value is not None:
            args += [flag, str(value)]
    args += ["--gpu-memory-utilization", _fmt(knobs.gpu_memory_utilization)]
    args.append("--enable-prefix-caching" if knobs.enable_prefix_caching else
                "--no-enable-prefix-caching")  # fmt: skip
    args += ["--scheduling-policy", knobs.scheduling_policy]
    args += ["--block-size", str(knobs.block_size), "--kv-cache-dtype", knobs.kv_cache_dtype]
    if knobs.host_kv_gib > 0:
        args += ["--host-kv-gib", _fmt(knobs.host_kv_gib)]
    if pool.lora_adapters:
        args += ["--lora-modules", *(f"{n}={LORA_ROOT}/{n}" for n in pool.lora_adapters)]
    args += ["--shutdown-timeout", str(knobs.shutdown_timeout_s)]
    if knobs.load_time_s > 0:
        args += ["--load-time-s", _fmt(knobs.load_time_s)]
    return args


def replica_env(pool: PoolSpec, replica_index: int) -> dict[str, str]:
    """Environment a replica needs: its HTTP keep-alive, and its GPUs when the stack pins them."""
    env = {}
    if pool.gpu_ids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in pool.gpu_ids[replica_index])
    env[KEEP_ALIVE_ENV] = str(ENGINE_KEEP_ALIVE_S)
    return env


def replica_ports(
    stack: StackSpec, base_port: int = DEFAULT_ENGINE_BASE_PORT
) -> dict[tuple[str, int], int]:
    """A port for each launched replica, `(pool name, replica index) -> port`, consecutive from
    `base_port` in stack order. `url` and `sglang` pools attach to their `urls` and take none."""
    ports: dict[tuple[str, int], int] = {}
    port = base_port
    for pool in stack.pools:
        if stack.engine_of(pool) in ATTACHED_KINDS:
            continue
        for index in range(pool.replicas):
            ports[(pool.name, index)] = port
            port += 1
    return ports

"""Engine command lines rendered from the stack file: pure functions, no I/O.

* `vllm_serve_args(stack, pool, replica_index, port)`: the arguments that follow `vllm serve`
  for one replica of a pool (the model first, then flags). `up` runs them; `render` puts them in
  Kubernetes manifests. Knob flags come from the knob type (`inhouse.launch.knob_flags`): a knob is
  rendered when it differs from its default or is marked `always`; `knobs.extra_args` come
  last, so they win. Tool calling is on where the model's family has a parser (a catalog
  field); tracing where `knobs.otlp_traces_endpoint` is set.
* `simulated_engine_args(...)`: the arguments that follow `inhouse engine`, the same replica
  simulated, its knob flags generated from the same type, tool calling by the same rule.
* `replica_env(pool, replica_index)`: environment for the replica (`CUDA_VISIBLE_DEVICES` from
  `gpu_ids`, and `VLLM_HTTP_TIMEOUT_KEEP_ALIVE`: see `ENGINE_KEEP_ALIVE_S`).
* `replica_ports(stack, base_port)`: one port per replica of every pool that `up` launches.

Conventions: quantization `fp8` renders `--quantization fp8` (online FP8 of a 16-bit checkpoint)
only on a 16-bit checkpoint (`is_online_fp8`): as its config.json says where the edge read one
(a local model directory, the verified weights `up` loads), else as its name says (no "fp8");
other schemes, and FP8 checkpoints, are read by vLLM from the checkpoint's config, so nothing is
rendered.
LoRA adapters are served from `LORA_ROOT/<name>`. `--enable-prompt-tokens-details` is always on,
so `usage.prompt_tokens_details.cached_tokens` reports prefix-cache hits to clients.
"""

from __future__ import annotations

from inhouse.launch.knob_flags import fmt_number, simulated_knob_args, vllm_knob_args
from inhouse.spec.catalog import find_catalog_model, find_local_model
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


def tool_call_parser(pool: PoolSpec) -> str | None:
    """vLLM's tool-call parser for the pool: the knob's, else the catalog's for the model's
    family; None when tool calling stays off (`none`, or a family without a parser)."""
    parser = pool.knobs.tool_call_parser
    if parser is None:
        model = find_catalog_model(pool.model)
        parser = model.tool_call_parser if model is not None else None
    return None if parser in (None, "", "none") else parser


def checkpoint_quant(pool: PoolSpec, model: str | None = None) -> str | None:
    """How the checkpoint vLLM loads stores its weights (`none`: 16 bits), where the edge read
    its config.json: `model`, the directory loaded instead of the pool's (the verified weights
    `up` hands vLLM), else the pool's model when it is a local directory. None when only its
    name is known (a catalog name, a registry pool at render time)."""
    for name in (model, pool.model):
        spec = find_local_model(name) if name is not None else None
        if spec is not None and spec.checkpoint_quant is not None:
            return spec.checkpoint_quant
    return None


def is_online_fp8(pool: PoolSpec, model: str | None = None) -> bool:
    """An FP8 pool on a 16-bit checkpoint, which vLLM quantizes at load (`--quantization fp8`).
    A quantized checkpoint carries its scheme in its config, and vLLM refuses `--quantization
    fp8` on one whose scheme is another's (compressed-tensors, fbgemm_fp8: "Quantization
    method specified in the model config ... does not match"), so none is passed: vLLM reads
    the config. The checkpoint's config decides where it was read (`checkpoint_quant`); else
    its name: one that says FP8 (the model, or the registry's name for its weights) is taken
    for an FP8 checkpoint."""
    if pool.quant.lower() not in ("fp8", "fp8_e4m3"):
        return False
    stored = checkpoint_quant(pool, model)
    if stored is not None:
        return stored == "none"
    weights = pool.weights
    names = [pool.model]
    if weights is not None:
        names += [n for n in (weights.name, weights.weights_dir) if n]
    return not any("fp8" in name.lower() for name in names)


def _lora_args(pool: PoolSpec) -> list[str]:
    """The adapters, their GPU slots (`max_loras`: by default one per adapter, so none swaps)
    and rank, and a host-memory cache for all of them (`--max-cpu-loras`), so that a slot swap
    loads from host memory, never from disk."""
    adapters = pool.lora_adapters
    if not adapters:
        return []
    knobs = pool.knobs
    slots = knobs.max_loras if knobs.max_loras is not None else len(adapters)
    args = ["--enable-lora", "--max-loras", str(slots)]
    args += ["--max-lora-rank", str(knobs.max_lora_rank)]
    args += ["--max-cpu-loras", str(max(slots, len(adapters)))]
    return [*args, "--lora-modules", *(f"{n}={LORA_ROOT}/{n}" for n in adapters)]


def _tool_args(pool: PoolSpec) -> list[str]:
    """`--enable-auto-tool-choice --tool-call-parser NAME` where the pool calls tools: vLLM's
    flags, which the simulated engine takes too (so both answer `tool_choice` alike)."""
    parser = tool_call_parser(pool)
    return [] if parser is None else ["--enable-auto-tool-choice", "--tool-call-parser", parser]


def _agent_args(pool: PoolSpec) -> list[str]:
    """Tool calling by model family; OTLP tracing when an endpoint is set (render sets Tempo's
    when `observability.tracing.enabled`), detailed spans when asked for (they cost step
    time: `observability.tracing.detailed` or `knobs.collect_detailed_traces`)."""
    args = _tool_args(pool)
    knobs = pool.knobs
    if knobs.otlp_traces_endpoint:
        args += ["--otlp-traces-endpoint", knobs.otlp_traces_endpoint]
        if knobs.collect_detailed_traces:
            args += ["--collect-detailed-traces", knobs.collect_detailed_traces]
    return args


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
    args = [model or pool.model, "--served-model-name", *_served_names(pool)]
    args += ["--host", host, "--port", str(port)]
    if pool.tp > 1:
        args += ["--tensor-parallel-size", str(pool.tp)]
    if is_online_fp8(pool, model):
        args += ["--quantization", "fp8"]
    args += vllm_knob_args(knobs)
    if knobs.host_kv_gib > 0:
        args += ["--kv-offloading-size", fmt_number(knobs.host_kv_gib)]
        args += ["--kv-offloading-backend", "native"]
    args += _lora_args(pool)
    args += _agent_args(pool)
    args.append("--enable-prompt-tokens-details")
    args += list(knobs.extra_args)
    return args


def simulated_engine_args(
    stack: StackSpec, pool: PoolSpec, replica_index: int, port: int, host: str = "127.0.0.1"
) -> list[str]:
    """Arguments after `inhouse engine` for the same replica, simulated: every knob the
    simulated engine takes, generated from the knob type (`knob_flags`), and vLLM's
    tool-calling flags by vLLM's rule; vLLM-only knobs (`extra_args`, tracing) are not
    passed."""
    assert 0 <= replica_index < pool.replicas, f"pool {pool.name} has {pool.replicas} replicas"
    args = ["--model", pool.model, "--served-model-name", *_served_names(pool)]
    args += ["--gpu", pool.gpu, "--tp", str(pool.tp), "--quant", pool.quant]
    args += ["--backend", pool.backend, "--host", host, "--port", str(port)]
    args += simulated_knob_args(pool.knobs)
    if pool.lora_adapters:
        args += ["--lora-modules", *(f"{n}={LORA_ROOT}/{n}" for n in pool.lora_adapters)]
    return args + _tool_args(pool)


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

"""The `vllm serve` values render and `inhouse up` refuse: those vLLM's own parser or config
checks refuse (the engine would exit before it loads the model: a pod that crash-loops, or an
`up` that fails with vLLM's error in its log tail), and `knobs.extra_args` that override a
flag the rendered manifests (and `up`'s command lines) rest on. Each error names the pool, the
knob and the fix. The choice lists are vLLM 0.32's; the vllm tier (tests/render/test_vllm.py)
reads them back from a real vLLM. Pure: render and launch both import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from inhouse.errors import SpecError
from inhouse.launch.engine_args import tool_call_parser
from inhouse.spec.catalog import GpuSpec, get_gpu, get_model
from inhouse.spec.quant import kv_dtype_bytes, normalize_quant
from inhouse.spec.stack import PoolSpec, StackSpec

# `vllm serve --kv-cache-dtype` choices that this project also sizes (vLLM's CacheDType;
# `bf16` and `fp16`, which the simulator takes, are not among them).
VLLM_KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
# `vllm serve --max-lora-rank` and `--collect-detailed-traces` choices (vLLM 0.32's parser;
# tests/render/test_vllm.py reads them back from a real vLLM in the vllm tier).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
VLLM_DETAILED_TRACES = ("model", "worker", "all")
# `vllm serve --tool-call-parser` names vLLM 0.32 registers (`ToolParserManager`); another
# exits at start ("invalid tool call parser") unless `--tool-parser-plugin` registers it.
VLLM_TOOL_PARSERS = (
    "apertus", "cohere_command3", "cohere_command4", "deepseek_v3", "deepseek_v31",
    "deepseek_v32", "deepseek_v4", "deepseek_v41", "dots", "ernie45", "functiongemma", "gemma4",
    "gigachat3", "glm45", "glm47", "granite", "granite-20b-fc", "granite4", "hermes", "hf",
    "hunyuan_a13b", "hy_v3", "hy_v4", "inkling", "internlm", "jamba", "k2_horizon", "kimi_k2",
    "kimi_k3", "lfm2", "ling3", "llama3_json", "llama4_json", "llama4_pythonic", "longcat",
    "mimo", "minicpm5", "minimax_m2", "minimax_m3", "mistral", "muse_glimmer", "olmo3",
    "openai", "phi4_mini_json", "plamo3", "poolside_v1", "pythonic", "qwen3_coder",
    "qwen3_json", "qwen3_xml", "seed_oss", "step3", "step3p5", "xlam",
)  # fmt: skip
# `vllm serve` flags (vLLM's spellings and short aliases) the rendered manifests and `up`'s
# command lines depend on, so `knobs.extra_args` may not override them; why, and the fix, as the
# command that refuses it words them: `render` (the manifests) or `up` (local processes).
# `{tp}`: the pool's tp.
Launcher = Literal["render", "up"]


@dataclass(frozen=True, slots=True)
class OwnedFlag:
    render: str
    up: str

    def why(self, launcher: Launcher) -> str:
        return self.render if launcher == "render" else self.up


_GPU_COUNT = OwnedFlag(
    "changes how many GPUs vLLM needs, but the pod gets the pool's tp (nvidia.com/gpu: {tp}) "
    "and vLLM would not start; scale out with the pool's replicas instead",
    "changes how many GPUs vLLM needs, but `inhouse up` starts each replica for the pool's tp "
    "({tp} GPUs; its gpu_ids group when the stack pins them); scale out with the pool's "
    "replicas instead",
)
_TP = OwnedFlag(
    "is rendered from the pool's tp, which also sizes the pod's GPUs; set the pool's tp instead",
    "is set by `inhouse up` from the pool's tp, which also sizes each replica's gpu_ids group "
    "when the stack pins them; set the pool's tp instead",
)
_ADDRESS = OwnedFlag(
    "is rendered: the probes, the Services and the NetworkPolicy use the rendered address and "
    "port; remove it",
    "is set by `inhouse up` (its --host, and a port from --engine-base-port): the gateway and "
    "up's wait for /health reach each replica there; remove it",
)
OWNED_EXTRA_FLAGS: dict[str, OwnedFlag] = {
    "--tensor-parallel-size": _TP,
    "-tp": _TP,
    "--pipeline-parallel-size": _GPU_COUNT,
    "-pp": _GPU_COUNT,
    "--data-parallel-size": _GPU_COUNT,
    "-dp": _GPU_COUNT,
    "--data-parallel-size-local": _GPU_COUNT,
    "-dpl": _GPU_COUNT,
    "--served-model-name": OwnedFlag(
        "would rename the vllm:* series' model_name that the alerts, dashboards and KEDA "
        "select on; set served_model_name or aliases instead",
        "would rename the model vLLM serves, but the gateway `inhouse up` starts sends the "
        "pool's served name and would get 404s; set served_model_name or aliases instead",
    ),
    "--host": _ADDRESS,
    "--port": _ADDRESS,
    "--uds": OwnedFlag(
        "would move the API off the TCP port the probes, the Services and the NetworkPolicy "
        "use; remove it",
        "would move the API off the TCP port `inhouse up` gives the replica, where the gateway "
        "and up's wait for /health reach it; remove it",
    ),
    "--disable-log-stats": OwnedFlag(
        "turns off vLLM's /metrics series: every engine alert, dashboard and KEDA trigger "
        "would go blind; remove it",
        "turns off vLLM's /metrics series, which the gateway `inhouse up` starts scrapes for "
        "each replica's queue and KV use (its routing load); remove it",
    ),
    "--api-key": OwnedFlag(
        "makes vLLM refuse the gateway's requests (the gateway sends no key; the "
        "NetworkPolicy is what admits only the gateway); remove it",
        "makes vLLM refuse the requests of the gateway `inhouse up` starts (it sends no key; "
        "tenants' keys are checked at the gateway); remove it",
    ),
}


def check_launched_vllm_pools(stack: StackSpec) -> None:
    """`check_vllm_values` for every pool `inhouse up` launches with vLLM (not the simulated
    ones, nor those it attaches to: their engines are not started from the stack's knobs)."""
    for pool in stack.pools:
        if stack.engine_of(pool) == "vllm":
            check_vllm_values(pool, "up")


def check_vllm_values(pool: PoolSpec, launcher: Launcher = "render") -> None:
    """Raise a `SpecError` for the first value of the pool that `vllm serve` refuses (its
    parser, or its config checks before the model loads) or that contradicts the manifests
    (`launcher` render) or `up`'s command lines (`launcher` up), worded for that command."""
    dtype = pool.knobs.kv_cache_dtype
    try:
        normalize_quant(pool.quant)
        kv_dtype_bytes(dtype)
    except SpecError as exc:
        raise SpecError(f"pool {pool.name!r}: {exc}") from None
    if dtype not in VLLM_KV_CACHE_DTYPES:
        raise SpecError(
            f"pool {pool.name!r}: knobs.kv_cache_dtype {dtype!r} is not a value vLLM's "
            f"--kv-cache-dtype takes ({', '.join(VLLM_KV_CACHE_DTYPES)}); use auto for the "
            "model's own 16-bit dtype"
        )
    _check_vllm_choices(pool)
    _check_extra_args(pool, launcher)
    _check_scheduler(pool)


def _check_vllm_choices(pool: PoolSpec) -> None:
    """Knobs vLLM's parser takes from a fixed list: another value and `vllm serve` exits
    before it loads the model."""
    knobs = pool.knobs
    if pool.lora_adapters and knobs.max_lora_rank not in VLLM_LORA_RANKS:
        fits = [r for r in VLLM_LORA_RANKS if r >= knobs.max_lora_rank]
        hint = f"use {fits[0]}, the next one up" if fits else "train adapters of a lower rank"
        raise SpecError(
            f"pool {pool.name!r}: knobs.max_lora_rank {knobs.max_lora_rank} is not a rank "
            f"vLLM's --max-lora-rank takes ({', '.join(map(str, VLLM_LORA_RANKS))}); {hint} "
            "(adapters of a lower rank load into a larger slot)"
        )
    parser = tool_call_parser(pool)
    plugin = any(_flag_name(a) == "--tool-parser-plugin" for a in knobs.extra_args)
    if parser is not None and parser not in VLLM_TOOL_PARSERS and not plugin:
        near = sorted(p for p in VLLM_TOOL_PARSERS if p.startswith(parser[:4])) or ["hermes"]
        raise SpecError(
            f"pool {pool.name!r}: knobs.tool_call_parser {parser!r} is not a parser vLLM "
            f"registers, and vLLM would exit at start; use one of its names (e.g. "
            f"{', '.join(near)}), 'none' for no tool calling, or register yours with "
            "--tool-parser-plugin in knobs.extra_args"
        )
    detailed = knobs.collect_detailed_traces
    if detailed is not None and detailed not in VLLM_DETAILED_TRACES:
        raise SpecError(
            f"pool {pool.name!r}: knobs.collect_detailed_traces {detailed!r} is not one value "
            f"vLLM's --collect-detailed-traces takes ({', '.join(VLLM_DETAILED_TRACES)}); use "
            "all for both the model and the worker spans"
        )


def _flag_name(arg: str) -> str:
    """`--data_parallel_size=2` -> `--data-parallel-size` (vLLM's parser takes either)."""
    name = arg.split("=", 1)[0]
    dashes = len(name) - len(name.lstrip("-"))
    return name[:dashes] + name[dashes:].replace("_", "-")


def _check_extra_args(pool: PoolSpec, launcher: Launcher) -> None:
    """`knobs.extra_args` come last and win: none may override a flag the manifests (or up's
    command lines) rest on."""
    for arg in pool.knobs.extra_args:
        owned = OWNED_EXTRA_FLAGS.get(_flag_name(arg)) if arg.startswith("-") else None
        if owned is not None:
            flag = arg.split("=", 1)[0]
            why = owned.why(launcher).format(tp=pool.tp)
            raise SpecError(f"pool {pool.name!r}: knobs.extra_args {flag!r} {why}")


def vllm_default_batch(gpu: GpuSpec) -> tuple[int, int]:
    """`vllm serve`'s own (max_num_batched_tokens, max_num_seqs) on this GPU when the flags are
    not given: vLLM 0.32's `EngineArgs.get_batch_defaults` for its OpenAI server."""
    if gpu.hbm_gb >= 160:
        return 16384, 1024
    if gpu.hbm_gb >= 70 and "a100" not in gpu.name:
        return 8192, 1024
    return 2048, 256


def _model_len(pool: PoolSpec) -> int | None:
    """`--max-model-len` as vLLM settles it: the knob, else the model's context (None for a
    model outside the catalog)."""
    if pool.knobs.max_model_len is not None:
        return pool.knobs.max_model_len
    try:
        return get_model(pool.model).max_context
    except SpecError:
        return None


def _check_scheduler(pool: PoolSpec) -> None:
    """vLLM's `SchedulerConfig.verify_max_model_len`: a step's token budget holds at least one
    token per sequence, and a prompt's chunk cap is within the context."""
    knobs = pool.knobs
    gpu = get_gpu(pool.gpu)
    default_batched, default_seqs = vllm_default_batch(gpu)
    max_len = _model_len(pool)
    if knobs.max_num_seqs is not None or knobs.max_num_batched_tokens is not None:
        seqs = knobs.max_num_seqs or default_seqs
        batched = knobs.max_num_batched_tokens or default_batched
        if knobs.max_num_batched_tokens is None and not knobs.enable_chunked_prefill:
            batched = max(batched, max_len or 0)
        if batched < seqs:
            whose = (
                "knobs.max_num_seqs"
                if knobs.max_num_seqs is not None
                else f"vLLM's default on {gpu.name}"
            )
            budget = (
                "knobs.max_num_batched_tokens"
                if knobs.max_num_batched_tokens is not None
                else f"vLLM's default max_num_batched_tokens on {gpu.name}"
            )
            raise SpecError(
                f"pool {pool.name!r}: {budget} {batched} is below "
                f"max_num_seqs {seqs} ({whose}), which vLLM refuses at start (every running "
                "sequence needs a token of each step); raise knobs.max_num_batched_tokens to at "
                f"least {seqs}, or set knobs.max_num_seqs to at most {batched}"
            )
    threshold = knobs.long_prefill_token_threshold
    if max_len is not None and threshold > max_len:
        raise SpecError(
            f"pool {pool.name!r}: knobs.long_prefill_token_threshold {threshold} is above "
            f"max_model_len {max_len}, which vLLM refuses at start; set it to at most "
            f"{max_len} (0: no cap)"
        )

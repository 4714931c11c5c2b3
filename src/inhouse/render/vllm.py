"""The `vllm serve` command line of a pool, each flag with the reason it is there.

The arguments themselves come from `inhouse.launch.engine_args.vllm_serve_args`, the one place the
stack's knobs become vLLM flags, so `inhouse up` and the rendered manifests run the same
command. This module adds the explanations and writes `vllm/<pool>.sh`. In Kubernetes the model
(the first argument) is its directory on the node's NVMe cache instead of the stack's `model`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from inhouse.launch.engine_args import (
    ENGINE_KEEP_ALIVE_S,
    KEEP_ALIVE_ENV,
    LORA_ROOT,
    replica_env,
    vllm_serve_args,
)
from inhouse.spec.stack import PoolSpec, StackSpec


@dataclass(frozen=True, slots=True)
class VllmFlag:
    flag: str
    values: tuple[str, ...]
    why: str

    def args(self) -> list[str]:
        return [self.flag, *self.values]


def flag_reasons(pool: PoolSpec) -> dict[str, str]:
    """Why each flag `vllm_serve_args` may render is there, for this pool."""
    return {
        **_serving_reasons(pool),
        **_scheduler_reasons(pool),
        **_lora_reasons(pool),
        **_request_reasons(),
    }


def _serving_reasons(pool: PoolSpec) -> dict[str, str]:
    """The model's names and address, its parallelism and precision, its length."""
    return {
        "--served-model-name": "names clients send as `model`; vLLM labels every vllm:* metric "
        "model_name=<first name>, which alerts, dashboards and KEDA select on",
        "--host": "listen address",
        "--port": "OpenAI API, /health (probes) and /metrics (Prometheus) all on this port",
        "--tensor-parallel-size": f"shard the model over {pool.tp} GPUs of one NVLink group; TP "
        "all-reduces every layer, so the group must be NVLink-joined (inhouse check topology)",
        "--quantization": "FP8 weights, quantized at load with online per-tensor scales from "
        "this 16-bit checkpoint (an FP8 checkpoint gets no flag: vLLM reads its scheme from its "
        "config): half the memory of bf16, native on Hopper/Blackwell",
        "--kv-cache-dtype": "KV cache element type; fp8 halves KV bytes per token (measure the "
        "accuracy delta against a 16-bit KV baseline before promoting)",
        "--max-model-len": "longest prompt + output accepted; longer requests get a 400, and "
        "each replica must hold one such sequence in KV",
    }


def _scheduler_reasons(pool: PoolSpec) -> dict[str, str]:
    """The batch, memory, prefix-cache, chunked-prefill and KV-tier knobs."""
    return {
        "--max-num-seqs": "cap on sequences per step: the batch size that keeps ITL under the SLO",
        "--max-num-batched-tokens": "token budget per step; with chunked prefill, long prompts "
        "are cut into chunks of this size and interleaved with decodes",
        "--gpu-memory-utilization": "share of each GPU's memory vLLM may take; weights and "
        "activations first, the rest is KV cache",
        "--enable-prefix-caching": "reuse KV of shared prompt prefixes (system prompt, earlier "
        "turns); the gateway routes by prefix to keep the hit rate high",
        "--no-enable-prefix-caching": "prefix caching off, as the stack asks",
        "--enable-chunked-prefill": "split long prefills so they do not stall other decodes",
        "--no-enable-chunked-prefill": "chunked prefill off, as the stack asks: long prefills "
        "stall decodes",
        "--scheduling-policy": "priority: the gateway's per-tenant `priority` orders the waiting "
        "queue (lower first)"
        if pool.knobs.scheduling_policy == "priority"
        else "first come, first served",
        "--block-size": "KV block size in tokens (the prefix-cache and routing granularity)",
        "--kv-offloading-size": "GiB of host RAM per replica as a second KV tier: evicted prefix "
        "blocks come back without recompute",
        "--kv-offloading-backend": "vLLM's native CPU offloading connector",
        "--long-prefill-token-threshold": "cap on one prompt's chunk per step, so a long "
        "prompt shares steps with shorter ones",
    }


def _lora_reasons(pool: PoolSpec) -> dict[str, str]:
    """LoRA adapters: on, their GPU slots (fewer than the adapters swap), rank, host copies."""
    knobs = pool.knobs
    num_adapters = len(pool.lora_adapters)
    if knobs.max_loras is None or knobs.max_loras >= num_adapters:
        slots = "one per adapter of this pool, so none swaps"
    else:
        slots = (
            f"{knobs.max_loras} for {num_adapters} adapters: a request for another waits for a "
            "free slot and its adapter is loaded from host memory"
        )
    return {
        "--enable-lora": "serve LoRA adapters on the shared base model",
        "--max-loras": f"adapter slots on the GPU, the most adapters one batch can mix: {slots}",
        "--max-lora-rank": "largest adapter rank; sizes each GPU slot (adapters above it fail "
        "to load)",
        "--max-cpu-loras": "adapters kept in host memory: all of this pool's, so a slot swap "
        "loads over PCIe, never from disk",
        "--lora-modules": "adapter name=path; clients select one by sending its name as `model`",
    }


def _request_reasons() -> dict[str, str]:
    """Tool calls, tracing, shutdown and usage reporting."""
    return {
        "--enable-auto-tool-choice": "let the model decide to call a tool (`tool_choice: auto`)",
        "--tool-call-parser": "parse the model family's tool-call format into OpenAI "
        "`tool_calls` (a catalog field per family; knobs.tool_call_parser overrides)",
        "--otlp-traces-endpoint": "send OpenTelemetry traces of each request to this collector",
        "--collect-detailed-traces": "add the model-forward and worker spans to those traces "
        "(costs some step time; knobs.collect_detailed_traces)",
        "--shutdown-timeout": "on SIGTERM finish in-flight requests for up to this many seconds, "
        "then abort (vLLM >= 0.18); terminationGracePeriodSeconds covers preStop + this",
        "--enable-prompt-tokens-details": "report usage.prompt_tokens_details.cached_tokens, "
        "which the gateway bills and uses to check prefix-cache routing",
    }


def split_flags(args: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """`[--a, 1, --b, --c, x, y]` -> `[(--a, (1,)), (--b, ()), (--c, (x, y))]`."""
    groups: list[tuple[str, list[str]]] = []
    for arg in args:
        if arg.startswith("--") or not groups:
            groups.append((arg, []))
        else:
            groups[-1][1].append(arg)
    return [(flag, tuple(values)) for flag, values in groups]


def explained_flags(stack: StackSpec, pool: PoolSpec, port: int) -> list[VllmFlag]:
    """The flags after the model, each with its reason (`extra_args` say so)."""
    args = vllm_serve_args(stack, pool, 0, port)[1:]
    reasons = flag_reasons(pool)
    extra = set(pool.knobs.extra_args)
    flags = []
    for flag, values in split_flags(args):
        why = reasons.get(flag, "")
        if flag in extra:
            why = f"from the stack's extra_args{': ' + why if why else ''}"
        assert why, f"flag {flag} has no explanation; add it to flag_reasons"
        flags.append(VllmFlag(flag, values, why))
    return flags


def kubernetes_args(stack: StackSpec, pool: PoolSpec, model_path: str, port: int) -> list[str]:
    """`vllm serve` arguments in a pod: the model is its directory on the node's NVMe cache."""
    args = vllm_serve_args(stack, pool, 0, port)
    return [model_path, *args[1:]]


def render_vllm_script(stack: StackSpec, pool: PoolSpec, *, base_port: int) -> str:
    """`vllm/<pool>.sh`: the exact command per replica, flags explained, runnable with bash."""
    ports = [base_port + i for i in range(pool.replicas)]
    flags = explained_flags(stack, pool, base_port)
    last = pool.replicas - 1
    lines = [
        "#!/usr/bin/env bash",
        f"# Pool {pool.name!r} of stack {stack.name!r}: {pool.model} served as "
        f"{pool.client_model_name!r}, {pool.quant}, TP={pool.tp}, {pool.replicas} replica(s).",
        "# Rendered by `inhouse render` from the same arguments `inhouse up` runs; the",
        "# Kubernetes manifests run them too, with the model read from the node's NVMe cache.",
        "# Metrics: vLLM serves Prometheus metrics at /metrics on --port (do not pass",
        "# --disable-log-stats, which turns them off).",
        f"# LoRA adapters (if any) are read from {LORA_ROOT}/<name>.",
        f"# Usage: {pool.name}.sh REPLICA   (REPLICA in 0..{last}). Exactly:",
    ]
    for index, port in enumerate(ports):
        prefix = "".join(f"{k}={v} " for k, v in replica_env(pool, index).items())
        args = vllm_serve_args(stack, pool, index, port)
        lines.append(f"#   {prefix}vllm serve {shlex.join(args)}")
    lines += ["set -euo pipefail", "", 'replica="${1:?usage: $0 REPLICA}"', 'case "$replica" in']
    for index, port in enumerate(ports):
        env = replica_env(pool, index)
        gpus = {k: v for k, v in env.items() if k != KEEP_ALIVE_ENV}
        pin = "".join(f"export {k}={v}; " for k, v in gpus.items()) or "# GPUs: as given; "
        lines.append(f"  {index}) {pin}port={port} ;;")
    lines += [
        f'  *) echo "REPLICA must be 0..{last}" >&2; exit 2 ;;',
        "esac",
        f"# Idle HTTP connections kept {ENGINE_KEEP_ALIVE_S} s (vLLM's default is 5 s): longer "
        "than the gateway keeps",
        "# its own (proxy.upstream_idle_s), so a burst reuses them instead of reconnecting.",
        f'export {KEEP_ALIVE_ENV}="${{{KEEP_ALIVE_ENV}:-{ENGINE_KEEP_ALIVE_S}}}"',
        "",
        "args=(",
    ]
    for flag in flags:
        lines.append(f"  # {flag.why}")
        if flag.flag == "--port":
            lines.append('  --port "$port"')
        else:
            lines.append("  " + " ".join(shlex.quote(a) for a in flag.args()))
    lines += [")", "", f'exec vllm serve {shlex.quote(pool.model)} "${{args[@]}}"', ""]
    return "\n".join(lines)

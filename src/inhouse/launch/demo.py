"""The built-in demo stack of `inhouse up` with no stack file: the CRM copilot, simulated.

The shape of examples/crm-copilot/stack.yaml — a 70B chat model at FP8 as TP=4 replicas on
H100s, priority scheduling, utility tasks as LoRA adapters — with one replica per CPU core of
this machine (a simulated engine keeps about a core busy at high concurrency), at least one and
at most the example's two.
"""

from __future__ import annotations

from inhouse.spec.stack import StackSpec, parse_stack


def demo_stack(num_cpus: int) -> StackSpec:
    replicas = max(1, min(2, num_cpus))
    data = {
        "version": 1,
        "name": "crm-copilot-demo",
        "engine": "simulated",
        "pools": [
            {
                "name": "chat",
                "model": "meta-llama/Llama-3.3-70B-Instruct",
                "served_model_name": "chat-70b",
                "lora_adapters": ["utility-summarize", "utility-classify", "utility-extract"],
                "gpu": "h100_sxm",
                "quant": "fp8",
                "tp": 4,
                "replicas": replicas,
                "knobs": {
                    "max_num_seqs": 128,
                    "max_model_len": 32768,
                    "scheduling_policy": "priority",
                },
                "routing": {"policy": "cache_aware"},
            }
        ],
    }
    return parse_stack(data, "built-in demo stack")

"""The rendered `vllm serve` arguments parse with real vLLM's own argument parser.

Every knob vLLM takes, the LoRA slots and rank, the tool-call parser by model family and the
tracing flags: parsed by the vLLM CPU build's `make_arg_parser` (no model is loaded), and the
values vLLM reads back are the stack's. Marked `vllm` (it needs `.ci/vllm-tier`'s venv).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tests.server.test_compat import vllm_python

from inhouse.launch.engine_args import vllm_serve_args
from inhouse.spec.load import load_stack
from inhouse.spec.stack import parse_stack

pytestmark = pytest.mark.vllm
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

PARSE = """
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:  # older layouts
    from vllm.entrypoints.openai.cli_args import make_arg_parser
out = []
for args in json.load(sys.stdin):
    ns = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", args[0], *args[1:]])
    out.append({k: v for k, v in vars(ns).items() if isinstance(v, (int, float, str, bool, list))})
print(json.dumps(out, default=str))
"""


def parsed(argument_lists: list[list[str]]) -> list[dict[str, object]]:
    python = vllm_python()
    if python is None:
        pytest.skip("no vLLM CPU venv (run .ci/vllm-tier)")
    done = subprocess.run(
        [python, "-c", PARSE],
        input=json.dumps(argument_lists),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: list[dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_every_rendered_flag_is_one_vllm_accepts_with_the_stacks_values() -> None:
    crm = load_stack(EXAMPLES / "crm-copilot" / "stack.yaml")
    knobs = {
        "max_num_seqs": 64,
        "max_num_batched_tokens": 1024,
        "max_model_len": 8192,
        "long_prefill_token_threshold": 256,
        "gpu_memory_utilization": 0.85,
        "enable_prefix_caching": False,
        "enable_chunked_prefill": False,
        "scheduling_policy": "fcfs",
        "block_size": 32,
        "kv_cache_dtype": "fp8",
        "host_kv_gib": 8,
        "max_loras": 1,
        "max_lora_rank": 32,
        "tool_call_parser": "hermes",
        "otlp_traces_endpoint": "grpc://collector:4317",
        "collect_detailed_traces": "model",
        "shutdown_timeout_s": 5,
    }
    rich = parse_stack(
        {
            "name": "rich",
            "pools": [
                {
                    "name": "p",
                    "model": "Qwen/Qwen2.5-7B-Instruct",
                    "lora_adapters": ["a", "b"],
                    "knobs": knobs,
                }
            ],
        }
    )
    lists = [
        vllm_serve_args(crm, crm.pools[0], 0, 8000),
        vllm_serve_args(rich, rich.pools[0], 0, 8000),
    ]
    crm_ns, rich_ns = parsed(lists)
    assert crm_ns["max_loras"] == 3 and crm_ns["max_cpu_loras"] == 3
    assert crm_ns["tool_call_parser"] == "llama3_json" and crm_ns["enable_auto_tool_choice"]
    assert crm_ns["scheduling_policy"] == "priority"
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len",
                 "long_prefill_token_threshold", "gpu_memory_utilization",
                 "enable_prefix_caching", "enable_chunked_prefill", "scheduling_policy",
                 "block_size", "kv_cache_dtype", "max_loras", "max_lora_rank",
                 "tool_call_parser", "otlp_traces_endpoint"):  # fmt: skip
        assert rich_ns[name] == knobs[name], name
    assert rich_ns["collect_detailed_traces"] == ["model"]
    assert rich_ns["shutdown_timeout"] == 5
    assert rich_ns["kv_offloading_size"] == 8
    assert rich_ns["max_cpu_loras"] == 2

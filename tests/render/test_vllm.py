from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from inhouse.launch import vllm_checks
from inhouse.launch.engine_args import vllm_serve_args
from inhouse.render import Rendered
from inhouse.render.vllm import explained_flags, kubernetes_args, split_flags
from inhouse.spec.catalog import get_model, known_models
from inhouse.spec.load import load_stack
from inhouse.spec.stack import StackSpec, parse_stack

CRM_FLAGS = {
    "--served-model-name": ("chat-70b",),
    "--tensor-parallel-size": ("4",),
    "--quantization": ("fp8",),
    "--max-model-len": ("32768",),
    "--max-num-seqs": ("128",),
    "--enable-prefix-caching": (),
    "--scheduling-policy": ("priority",),
    "--enable-lora": (),
    "--max-loras": ("3",),
    "--lora-modules": (
        "utility-summarize=/models/lora/utility-summarize",
        "utility-classify=/models/lora/utility-classify",
        "utility-extract=/models/lora/utility-extract",
    ),
    "--shutdown-timeout": ("30",),
    "--enable-prompt-tokens-details": (),
}


def test_crm_script_pins_the_two_replicas_to_the_nvlink_halves(crm: Rendered) -> None:
    script = crm.files["vllm/chat.sh"]
    assert "  0) export CUDA_VISIBLE_DEVICES=0,1,2,3; port=8000 ;;" in script
    assert "  1) export CUDA_VISIBLE_DEVICES=4,5,6,7; port=8001 ;;" in script
    assert (
        "#   CUDA_VISIBLE_DEVICES=4,5,6,7 VLLM_HTTP_TIMEOUT_KEEP_ALIVE=75 vllm serve "
        "meta-llama/Llama-3.3-70B-Instruct " in script
    )
    # Engines keep idle connections longer than the gateway does (a burst reuses them).
    assert 'export VLLM_HTTP_TIMEOUT_KEEP_ALIVE="${VLLM_HTTP_TIMEOUT_KEEP_ALIVE:-75}"' in script


def test_crm_flags_are_the_stack_choices_and_each_is_explained(crm_stack: StackSpec) -> None:
    flags = explained_flags(crm_stack, crm_stack.pool("chat"), 8000)
    chosen = {f.flag: f.values for f in flags}
    for flag, values in CRM_FLAGS.items():
        assert chosen[flag] == values, flag
    assert all(len(f.why) > 10 for f in flags)


def test_script_comments_every_flag_and_is_valid_bash(crm: Rendered, tmp_path: Path) -> None:
    script = crm.files["vllm/chat.sh"]
    body = script.split("args=(\n", 1)[1].split("\n)\n", 1)[0].splitlines()
    for comment, flag in zip(body[::2], body[1::2], strict=True):
        assert comment.startswith("  # ") and flag.startswith("  --"), (comment, flag)
    if shutil.which("bash") is None:
        pytest.skip("bash not installed")
    path = tmp_path / "chat.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0


def test_script_runs_exactly_the_engine_args(
    crm_stack: StackSpec, crm: Rendered, tmp_path: Path
) -> None:
    """Replace `vllm` by a stub that prints its arguments: the script runs what `up` runs."""
    if shutil.which("bash") is None:
        pytest.skip("bash not installed")
    stub = tmp_path / "bin" / "vllm"
    stub.parent.mkdir()
    stub.write_text(
        '#!/bin/sh\necho "CUDA=$CUDA_VISIBLE_DEVICES"\nfor a in "$@"; do echo "$a"; done\n'
    )
    stub.chmod(0o755)
    script = tmp_path / "chat.sh"
    script.write_text(crm.files["vllm/chat.sh"])
    pool = crm_stack.pool("chat")
    for replica, gpus in ((0, "0,1,2,3"), (1, "4,5,6,7")):
        out = subprocess.run(
            ["bash", str(script), str(replica)],
            env={"PATH": f"{stub.parent}:/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        assert out[0] == f"CUDA={gpus}"
        assert out[1:] == ["serve", *vllm_serve_args(crm_stack, pool, replica, 8000 + replica)]


def test_split_flags_groups_values_with_their_flag() -> None:
    assert split_flags(["--a", "1", "--b", "--c", "x", "y"]) == [
        ("--a", ("1",)),
        ("--b", ()),
        ("--c", ("x", "y")),
    ]


def test_extra_args_are_marked_as_such() -> None:
    stack = parse_stack(
        {
            "name": "demo",
            "pools": [
                {
                    "name": "chat",
                    "model": "Llama-3.1-8B",
                    "knobs": {"extra_args": ["--tool-call-parser", "llama3_json"]},
                }
            ],
        }
    )
    flags = explained_flags(stack, stack.pools[0], 8000)
    assert flags[-1].flag == "--tool-call-parser"
    assert flags[-1].why.startswith("from the stack's extra_args")


def test_kubernetes_args_read_the_model_from_the_node_cache(crm_stack: StackSpec) -> None:
    pool = crm_stack.pool("chat")
    args = kubernetes_args(crm_stack, pool, "/models/meta-llama/Llama-3.3-70B-Instruct", 8000)
    assert args == [
        "/models/meta-llama/Llama-3.3-70B-Instruct",
        *vllm_serve_args(crm_stack, pool, 0, 8000)[1:],
    ]


PARSE_WITH_VLLM = """
import json, sys
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser  # vLLM >= 0.2x
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser  # vLLM 0.11
from vllm.utils.argparse_utils import FlexibleArgumentParser
args = json.loads(sys.argv[1])
ns = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", *args])
print(json.dumps({"tp": ns.tensor_parallel_size, "max_num_seqs": ns.max_num_seqs,
                  "shutdown_timeout": ns.shutdown_timeout, "policy": ns.scheduling_policy,
                  "loras": [m.name for m in ns.lora_modules or []]}))
"""


def parse_with_vllm(args: list[str]) -> dict[str, object]:
    python = os.environ.get("INHOUSE_VLLM_PYTHON")
    if not python:
        pytest.skip("INHOUSE_VLLM_PYTHON (a vLLM install, see .ci/vllm-tier) is not set")
    done = subprocess.run(
        [python, "-c", PARSE_WITH_VLLM, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    parsed: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


@pytest.mark.vllm
def test_vllm_own_parser_accepts_the_rendered_arguments(crm_stack: StackSpec) -> None:
    """vLLM's own `vllm serve` argument parser (no GPU needed) reads every rendered flag."""
    parsed = parse_with_vllm(vllm_serve_args(crm_stack, crm_stack.pool("chat"), 0, 8000))
    assert parsed == {
        "tp": 4,
        "max_num_seqs": 128,
        "shutdown_timeout": 30,
        "policy": "priority",
        "loras": ["utility-summarize", "utility-classify", "utility-extract"],
    }


@pytest.mark.vllm
def test_vllm_parser_accepts_every_pool_of_the_code_assistant() -> None:
    stack = load_stack(Path(__file__).resolve().parents[2] / "examples/code-assistant/stack.yaml")
    args = [vllm_serve_args(stack, pool, 0, 8000) for pool in stack.pools]
    assert any("--kv-offloading-size" in a for a in args)
    for pool, pool_args in zip(stack.pools, args, strict=True):
        assert parse_with_vllm(pool_args)["tp"] == pool.tp


CHOICES_IN_VLLM = """
import json
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser  # vLLM >= 0.2x
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser  # vLLM 0.11
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
flags = ("--max-lora-rank", "--collect-detailed-traces", "--kv-cache-dtype")
choices = {f: [c for c in a.choices if c is not None] for a in parser._actions
           for f in a.option_strings if f in flags}
from vllm.tool_parsers import ToolParserManager
choices["--tool-call-parser"] = sorted(ToolParserManager.list_registered())
print(json.dumps(choices))
"""


@pytest.mark.vllm
def test_the_values_render_checks_are_the_ones_vllm_parser_takes() -> None:
    """render refuses what vLLM's parser would: its lists are vLLM's own choices."""
    python = os.environ.get("INHOUSE_VLLM_PYTHON")
    if not python:
        pytest.skip("INHOUSE_VLLM_PYTHON (a vLLM install, see .ci/vllm-tier) is not set")
    done = subprocess.run(
        [python, "-c", CHOICES_IN_VLLM], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    choices = json.loads(done.stdout.strip().splitlines()[-1])
    assert tuple(choices["--max-lora-rank"]) == vllm_checks.VLLM_LORA_RANKS
    assert set(choices["--collect-detailed-traces"]) == set(vllm_checks.VLLM_DETAILED_TRACES)
    assert set(vllm_checks.VLLM_KV_CACHE_DTYPES) <= set(choices["--kv-cache-dtype"])
    assert sorted(vllm_checks.VLLM_TOOL_PARSERS) == choices["--tool-call-parser"]


SCHEDULER_IN_VLLM = """
import json, sys
from vllm.config.scheduler import SchedulerConfig
for kw in json.loads(sys.argv[1]):
    try:
        SchedulerConfig(max_model_len=8192, is_encoder_decoder=False, **kw)
        print("accepted")
    except ValueError as exc:
        print("refused")
"""


@pytest.mark.vllm
def test_vllm_refuses_the_scheduler_values_render_refuses() -> None:
    """render's (and up's) scheduler checks (`inhouse.launch.vllm_checks._check_scheduler`)
    mirror vLLM's config checks."""
    python = os.environ.get("INHOUSE_VLLM_PYTHON")
    if not python:
        pytest.skip("INHOUSE_VLLM_PYTHON (a vLLM install, see .ci/vllm-tier) is not set")
    cases = [
        {"max_num_batched_tokens": 128, "max_num_seqs": 256},
        {"max_num_batched_tokens": 256, "max_num_seqs": 256},
        {"max_num_batched_tokens": 8192, "max_num_seqs": 256, "long_prefill_token_threshold": 8193},
        {"max_num_batched_tokens": 8192, "max_num_seqs": 256, "long_prefill_token_threshold": 8192},
    ]
    done = subprocess.run(
        [python, "-c", SCHEDULER_IN_VLLM, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    verdicts = [line for line in done.stdout.splitlines() if line in ("accepted", "refused")]
    assert verdicts == ["refused", "accepted", "refused", "accepted"]


LOAD_QUANT_CONFIG = """
import json, sys
from vllm.config import ModelConfig
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
args = json.loads(sys.argv[1])
ns = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", *args])
try:
    ModelConfig(model=args[0], skip_tokenizer_init=True, quantization=ns.quantization)
    print("accepted")
except ValueError as exc:
    print("refused", " ".join(str(exc).split())[:300])
"""
# A tiny Llama's config.json in the shape of RedHatAI's FP8-dynamic checkpoints.
COMPRESSED_FP8 = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                            "symmetric": True, "dynamic": False},
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                      "symmetric": True, "dynamic": True},
            }
        },
        "ignore": ["lm_head"],
    },
}  # fmt: skip


@pytest.mark.vllm
def test_vllm_loads_the_config_of_an_fp8_checkpoint_with_the_rendered_flags(
    tmp_path: Path,
) -> None:
    """An FP8 pool on a compressed-tensors FP8 checkpoint: vLLM's ModelConfig (no weights
    loaded) takes the rendered arguments; with `--quantization fp8` it refused them."""
    python = os.environ.get("INHOUSE_VLLM_PYTHON")
    if not python:
        pytest.skip("INHOUSE_VLLM_PYTHON (a vLLM install, see .ci/vllm-tier) is not set")
    model = tmp_path / "Tiny-Llama-FP8-dynamic"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(COMPRESSED_FP8))
    stack = parse_stack(
        {"name": "s", "pools": [{"name": "p", "model": str(model), "quant": "fp8"}]}
    )
    args = vllm_serve_args(stack, stack.pools[0], 0, 8000)
    verdicts = []
    for rendered in (args, [*args, "--quantization", "fp8"]):
        done = subprocess.run(
            [python, "-c", LOAD_QUANT_CONFIG, json.dumps(rendered)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        last = done.stdout.strip().splitlines()[-1]
        verdicts.append(last.split()[0])
        assert last == "accepted" or "does not match the quantization method" in last, last
    assert verdicts == ["accepted", "refused"]


def test_every_catalog_tool_parser_is_one_vllm_registers() -> None:
    models = [get_model(name) for name in known_models()]
    parsers = {m.tool_call_parser for m in models if m.tool_call_parser}
    assert parsers and parsers <= set(vllm_checks.VLLM_TOOL_PARSERS)

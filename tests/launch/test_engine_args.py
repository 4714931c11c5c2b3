"""Stack -> engine command lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inhouse.launch.engine_args import (
    replica_env,
    replica_ports,
    simulated_engine_args,
    vllm_serve_args,
)
from inhouse.spec.load import load_stack, resolve_local_models
from inhouse.spec.stack import parse_stack

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_vllm_args_for_the_crm_copilot() -> None:
    stack = load_stack(EXAMPLES / "crm-copilot" / "stack.yaml")
    pool = stack.pools[0]
    args = vllm_serve_args(stack, pool, 1, 8101)
    assert args == [
        "meta-llama/Llama-3.3-70B-Instruct",
        "--served-model-name", "chat-70b",
        "--host", "0.0.0.0", "--port", "8101",
        "--tensor-parallel-size", "4",
        "--quantization", "fp8",
        "--max-num-seqs", "128",
        "--max-model-len", "32768",
        "--gpu-memory-utilization", "0.9",
        "--enable-prefix-caching",
        "--scheduling-policy", "priority",
        "--shutdown-timeout", "30",
        # one GPU slot per adapter, rank 16, every adapter in host memory
        "--enable-lora", "--max-loras", "3", "--max-lora-rank", "16", "--max-cpu-loras", "3",
        "--lora-modules",
        "utility-summarize=/models/lora/utility-summarize",
        "utility-classify=/models/lora/utility-classify",
        "utility-extract=/models/lora/utility-extract",
        # Llama 3.x calls tools in JSON (the catalog's parser for the family)
        "--enable-auto-tool-choice", "--tool-call-parser", "llama3_json",
        "--enable-prompt-tokens-details",
    ]  # fmt: skip
    # The engine keeps idle connections longer than the gateway does (no connect on a burst).
    assert replica_env(pool, 1) == {
        "CUDA_VISIBLE_DEVICES": "4,5,6,7",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75",
    }


def test_knobs_render_only_when_set_and_extra_args_come_last() -> None:
    stack = parse_stack({
        "name": "s",
        "pools": [{"name": "p", "model": "/models/tiny", "served_model_name": "tiny",
                   "aliases": ["t"], "knobs": {"block_size": 128, "enable_prefix_caching": False,
                   "enable_chunked_prefill": False, "kv_cache_dtype": "fp8", "host_kv_gib": 64,
                   "extra_args": ["--dtype", "bfloat16"]}}],
    })  # fmt: skip
    args = vllm_serve_args(stack, stack.pools[0], 0, 9000, host="127.0.0.1")
    assert args[:7] == ["/models/tiny", "--served-model-name", "tiny", "t", "--host",
                        "127.0.0.1", "--port"]  # fmt: skip
    for expected in (["--block-size", "128"], ["--kv-cache-dtype", "fp8"],
                     ["--kv-offloading-size", "64"], ["--no-enable-prefix-caching"],
                     ["--no-enable-chunked-prefill"]):  # fmt: skip
        i = args.index(expected[0])
        assert args[i : i + len(expected)] == expected
    assert "--tensor-parallel-size" not in args and "--quantization" not in args
    assert args[-2:] == ["--dtype", "bfloat16"]
    sim = simulated_engine_args(stack, stack.pools[0], 0, 9000)
    assert "--dtype" not in sim and sim[sim.index("--host-kv-gib") + 1] == "64"


def test_ports_are_consecutive_and_skip_attached_pools() -> None:
    stack = parse_stack({
        "name": "s",
        "pools": [{"name": "a", "model": "m", "replicas": 2},
                  {"name": "b", "model": "m2", "engine": "url", "urls": ["http://x:1"]},
                  {"name": "c", "model": "m3"}],
    })  # fmt: skip
    assert replica_ports(stack, 8100) == {("a", 0): 8100, ("a", 1): 8101, ("c", 0): 8102}


def test_the_simulated_engine_keeps_idle_connections_as_vllm_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s unless set; `up` sets 75 for every replica."""
    from inhouse.errors import SpecError
    from inhouse.server.serve import keep_alive_s

    monkeypatch.delenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", raising=False)
    assert keep_alive_s() == 5
    monkeypatch.setenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "75")
    assert keep_alive_s() == 75
    monkeypatch.setenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "soon")
    with pytest.raises(SpecError, match="VLLM_HTTP_TIMEOUT_KEEP_ALIVE='soon'"):
        keep_alive_s()


def test_block_size_is_rendered_only_when_the_stack_sets_it() -> None:
    # vLLM's CPU build uses 128-token blocks and refuses 16: an unset block size is left to
    # the platform, a set one (even to 16) is passed.
    def args(knobs: dict[str, object]) -> list[str]:
        stack = parse_stack({"name": "s", "pools": [{"name": "p", "model": "m", "knobs": knobs}]})
        return vllm_serve_args(stack, stack.pools[0], 0, 9000)

    assert "--block-size" not in args({})
    rendered = args({"block_size": 16})
    assert rendered[rendered.index("--block-size") + 1] == "16"


def _tool_flags(args: list[str]) -> list[str]:
    out = ["--enable-auto-tool-choice"] if "--enable-auto-tool-choice" in args else []
    if "--tool-call-parser" in args:
        out += args[args.index("--tool-call-parser") : args.index("--tool-call-parser") + 2]
    return out


@pytest.mark.parametrize(
    ("model", "knobs", "flags"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", {}, ["--tool-call-parser", "llama3_json"]),
        ("meta-llama/Llama-3.1-8B-Instruct", {"tool_call_parser": "hermes"},
         ["--tool-call-parser", "hermes"]),
        ("meta-llama/Llama-3.1-8B-Instruct", {"tool_call_parser": "none"}, []),
        ("phi-4", {}, []),  # a family without a parser
    ],
)  # fmt: skip
def test_the_simulated_engine_gets_the_tool_calling_flags_vllm_gets(
    model: str, knobs: dict[str, str], flags: list[str]
) -> None:
    """(review, stop 25) The demo stack answers `tool_choice: "auto"` as the vLLM deployment it
    stands in for: same rule (`tool_call_parser(pool)`), same flags."""
    import argparse

    from inhouse.cli.engine import add_arguments, options_from_args
    from inhouse.server.tools import ToolOptions

    stack = parse_stack({"name": "s", "pools": [{"name": "p", "model": model, "knobs": knobs}]})
    sim = simulated_engine_args(stack, stack.pools[0], 0, 9000)
    expected = ["--enable-auto-tool-choice", *flags] if flags else []
    assert _tool_flags(sim) == expected
    assert _tool_flags(vllm_serve_args(stack, stack.pools[0], 0, 9000)) == expected
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    tools = options_from_args(parser.parse_args(sim)).tools
    assert tools == (ToolOptions(True, flags[1]) if flags else ToolOptions())


@pytest.mark.parametrize(
    ("model", "weights_name", "online"),
    [
        ("meta-llama/Llama-3.3-70B-Instruct", None, True),  # 16-bit: vLLM quantizes at load
        ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", None, False),  # compressed-tensors
        ("/models/llama-70b", "llama-3.3-70b-instruct-fp8", False),  # the registry's name says
    ],
)
def test_fp8_is_asked_for_only_on_a_16_bit_checkpoint(
    model: str, weights_name: str | None, online: bool
) -> None:
    """vLLM refuses `--quantization fp8` on a checkpoint whose config names another FP8 scheme
    (compressed-tensors, fbgemm_fp8, modelopt): "Quantization method specified in the model
    config (compressed-tensors) does not match ... (fp8)". An FP8 checkpoint's own config
    says how it is quantized, so no flag is passed for one."""
    pool: dict[str, object] = {"name": "p", "model": model, "quant": "fp8"}
    if weights_name is not None:
        pool["weights"] = {
            "registry": "s3://models/llm",
            "name": weights_name,
            "revision": "r1",
            "public_key": "key.pub",
        }
    stack = parse_stack({"name": "s", "pools": [pool]})
    args = vllm_serve_args(stack, stack.pools[0], 0, 8000)
    assert ("--quantization" in args) is online
    if online:
        assert args[args.index("--quantization") + 1] == "fp8"


# A tiny Llama's config.json; with QUANTIZED, in the shape of an FP8 checkpoint's.
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 4,
    "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
}  # fmt: skip
QUANTIZED = {"quantization_config": {"quant_method": "compressed-tensors", "format": "float"}}


def _checkpoint(directory: Path, fp8: bool) -> Path:
    directory.mkdir(parents=True)
    config = {**TINY_CONFIG, **(QUANTIZED if fp8 else {})}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def _quantization(args: list[str]) -> str | None:
    return args[args.index("--quantization") + 1] if "--quantization" in args else None


@pytest.mark.parametrize(
    ("name", "fp8", "flag"),
    [("Tiny-Llama", True, None), ("Tiny-Llama-FP8-ready", False, "fp8")],
    ids=["fp8-checkpoint-plain-name", "16-bit-checkpoint-fp8-name"],
)
def test_a_local_checkpoints_config_decides_fp8_not_its_name(
    tmp_path: Path, name: str, fp8: bool, flag: str | None
) -> None:
    """The name was all that decided: an FP8 checkpoint in a directory whose name does not say
    so got `--quantization fp8` (vLLM refuses it: the config names another scheme), and a
    16-bit one whose name says FP8 got none (served at 16 bits, twice the memory planned)."""
    model = _checkpoint(tmp_path / name, fp8)
    stack_file = tmp_path / "stack.yaml"
    pool = {"name": "p", "model": str(model), "quant": "fp8"}
    stack_file.write_text(json.dumps({"name": "s", "pools": [pool]}))
    stack = load_stack(stack_file)
    assert _quantization(vllm_serve_args(stack, stack.pools[0], 0, 8000)) == flag


@pytest.mark.parametrize("fp8", [True, False], ids=["fp8-checkpoint", "16-bit-checkpoint"])
def test_the_verified_weights_config_decides_fp8_for_a_registry_pool(
    tmp_path: Path, fp8: bool
) -> None:
    """`up` loads the verified directory (a content address, no name) and has read its
    config.json: that decides, not the registry's name for the weights."""
    verified = _checkpoint(tmp_path / "sha256" / ("ab" * 32), fp8)
    resolve_local_models([str(verified)])
    weights = {"registry": "s3://models/llm", "name": "llama-3.3-70b-instruct",
               "revision": "r1", "public_key": "key.pub"}  # fmt: skip
    pool = {"name": "p", "model": "meta-llama/Llama-3.3-70B-Instruct", "quant": "fp8",
            "weights": weights}  # fmt: skip
    stack = parse_stack({"name": "s", "pools": [pool]})
    args = vllm_serve_args(stack, stack.pools[0], 0, 8000, model=str(verified))
    assert _quantization(args) == (None if fp8 else "fp8")

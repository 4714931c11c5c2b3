"""Render refuses a pool that would not start or not schedule as rendered, naming the field
and the fix (`inhouse.render.checks`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inhouse.engine.build import build_replica
from inhouse.errors import DoesNotFitError, SpecError
from inhouse.fleet import replica_spec_for_pool
from inhouse.render import RenderOptions, render_stack
from inhouse.spec.load import load_stack
from inhouse.spec.stack import parse_stack

ROOT = Path(__file__).resolve().parents[2]


def stack_with(nodes: object = None, **pool: object) -> dict[str, object]:
    data: dict[str, object] = {
        "version": 1,
        "name": "demo",
        "engine": "vllm",
        "nodes": [{"gpu": "h100_sxm", "gpus_per_node": 8, "count": 1}] if nodes is None else nodes,
        "pools": [{"name": "chat", "model": "llama-3.1-8b", **pool}],
    }
    return data


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ({"tp": 16}, r"tp=16 is more GPUs than a h100_sxm node has \(8\).*lower tp to at most 8"),
        ({"tp": 3}, r"tp=3: Llama-3.1-8B has 32 attention heads"),
        ({"routing": {"policy": "nonesuch"}}, r"routing policy 'nonesuch' is unknown; use one of"),
        ({"routing": {"policy": "oracle"}}, r"'oracle' .* exists only in the simulator"),
        (
            {"routing": {"policy": "cache_aware", "params": {"bogus": 1}}},
            r"routing\.params\.bogus: unknown parameter",
        ),
        ({"quant": "fp6"}, r"pool 'chat': unknown quantization 'fp6'"),
        ({"knobs": {"kv_cache_dtype": "bf16"}}, r"kv_cache_dtype 'bf16' is not a value vLLM"),
        ({"knobs": {"max_model_len": 200_000}}, r"max_model_len 200000 is longer than"),
        # vLLM's parser refuses both: `vllm serve` would exit before loading the model.
        (
            {"lora_adapters": ["a"], "knobs": {"max_lora_rank": 24}},
            r"knobs\.max_lora_rank 24 is not a rank vLLM's --max-lora-rank takes \(1, 8, 16, ",
        ),
        (
            {"knobs": {"collect_detailed_traces": "model,worker"}},
            r"knobs\.collect_detailed_traces 'model,worker' is not .* \(model, worker, all\)",
        ),
        # vLLM's SchedulerConfig refuses these at start (a ValueError before the model loads).
        (
            {"knobs": {"max_num_seqs": 256, "max_num_batched_tokens": 128}},
            r"knobs\.max_num_batched_tokens 128 is below max_num_seqs 256",
        ),
        (  # vLLM's max_num_seqs default on a >= 70 GiB GPU other than an A100 is 1024
            {"knobs": {"max_num_batched_tokens": 512}},
            r"max_num_batched_tokens 512 is below max_num_seqs 1024 \(vLLM's default on h100",
        ),
        (
            {"knobs": {"long_prefill_token_threshold": 100_000, "max_model_len": 8192}},
            r"knobs\.long_prefill_token_threshold 100000 is above max_model_len 8192",
        ),
        # vLLM exits at start on a parser it does not know ("invalid tool call parser").
        (
            {"knobs": {"tool_call_parser": "llama3"}},
            r"knobs\.tool_call_parser 'llama3' is not a parser vLLM .*llama3_json",
        ),
        # A Service name must start with a letter (DNS-1035): kubectl refuses `70b-engine`.
        ({"name": "70b"}, r"pool '70b': .*Service names must start with a letter.*rename"),
        ({"gpu": "a100_sxm_80gb"}, r"gpu 'a100_sxm_80gb' is on none of the stack's nodes"),
        ({"replicas": 9}, r"need 9 GPUs at their minimum replicas .* the nodes have 8"),
        ({"gpu_ids": [[9]]}, r"gpu_ids has GPU 9, but the node has GPUs 0\.\.7"),
        ({"replicas": 2, "gpu_ids": [[0], [0]]}, r"chat-1 and chat-0 are both pinned to GPU 0"),
    ],
)
def test_render_refuses_a_pool_that_cannot_run_as_rendered(
    pool: dict[str, object], message: str
) -> None:
    stack = parse_stack(stack_with(**pool))
    with pytest.raises(SpecError, match=message):
        render_stack(stack)


@pytest.mark.parametrize(
    ("extra_args", "message"),
    [
        # The pod gets tp GPUs (nvidia.com/gpu: tp): vLLM would ask for tp x dp and not start.
        (["--data-parallel-size", "2"], r"'--data-parallel-size' .*\(nvidia\.com/gpu: 1"),
        (["-dp=2"], r"'-dp' .* replicas"),
        (["--pipeline_parallel_size", "2"], r"'--pipeline_parallel_size' .*\(nvidia\.com/gpu"),
        (["-tp", "2"], r"'-tp' .* set the pool's tp"),
        # The alerts, dashboards and KEDA select vllm:* series by the rendered served name.
        (["--served-model-name", "other"], r"'--served-model-name' .* served_model_name"),
        (["--port=9000"], r"'--port' .* probes"),
        (["--disable-log-stats"], r"'--disable-log-stats' .* /metrics"),
    ],
)
def test_render_refuses_extra_args_that_contradict_the_manifests(
    extra_args: list[str], message: str
) -> None:
    stack = parse_stack(stack_with(knobs={"extra_args": extra_args}))
    with pytest.raises(SpecError, match=r"pool 'chat': knobs\.extra_args " + message):
        render_stack(stack)


def test_extra_args_the_manifests_do_not_own_pass() -> None:
    stack = parse_stack(
        stack_with(knobs={"extra_args": ["--enable-expert-parallel", "--max-logprobs=5"]})
    )
    assert "--enable-expert-parallel" in render_stack(stack).files["k8s/engine-chat.yaml"]


def test_a_tp_group_larger_than_the_catalog_node_is_refused_without_nodes() -> None:
    stack = parse_stack(stack_with(nodes=[], tp=16))
    with pytest.raises(SpecError, match=r"tp=16 is more GPUs than a h100_sxm node has \(8\)"):
        render_stack(stack)


def test_a_pool_whose_weights_and_one_sequence_do_not_fit_is_refused() -> None:
    # Llama-3.1-70B at bf16 is ~141 GB of weights: it cannot load on one 80 GB H100.
    stack = parse_stack(stack_with(model="llama-3.1-70b"))
    with pytest.raises(DoesNotFitError, match=r"pool 'chat' \(llama-3.1-70b, bf16, tp=1"):
        render_stack(stack)


def test_a_pool_whose_full_context_does_not_fit_needs_a_max_model_len() -> None:
    """Without knobs.max_model_len vLLM serves the model's whole context and refuses to start
    unless one such sequence fits the KV cache ("... is larger than the available KV cache
    memory"): Llama-3.1-8B's 128K tokens on one 24 GB L4."""
    nodes = [{"gpu": "l4", "gpus_per_node": 8, "count": 1}]
    stack = parse_stack(stack_with(nodes=nodes, gpu="l4"))
    kv_tokens = build_replica(replica_spec_for_pool(stack.pools[0])).memory.kv_tokens
    assert 0 < kv_tokens < 131_072
    with pytest.raises(SpecError, match=rf"131072-token context.* {kv_tokens:,} tokens of KV"):
        render_stack(stack)
    fits = stack_with(nodes=nodes, gpu="l4", knobs={"max_model_len": kv_tokens})
    assert render_stack(parse_stack(fits)).files


def test_the_pool_renders_once_its_values_are_ones_vllm_takes() -> None:
    stack = parse_stack(stack_with(tp=2, knobs={"kv_cache_dtype": "fp8"}))
    assert "k8s/engine-chat.yaml" in render_stack(stack).files


def test_a_token_budget_above_vllm_s_own_sequence_cap_on_that_gpu_renders() -> None:
    """vLLM's default max_num_seqs is 256 on a GPU under 70 GiB: a 512-token budget holds."""
    nodes = [{"gpu": "l40s", "gpus_per_node": 8, "count": 1}]
    pool = {"gpu": "l40s", "knobs": {"max_num_batched_tokens": 512, "max_model_len": 8192}}
    assert render_stack(parse_stack(stack_with(nodes=nodes, **pool))).files


def test_a_tool_parser_from_a_plugin_is_left_to_vllm() -> None:
    plugin = ["--tool-parser-plugin", "/models/parsers/ours.py"]
    knobs = {"tool_call_parser": "ours", "extra_args": plugin}
    assert render_stack(parse_stack(stack_with(knobs=knobs))).files


def test_the_scheduler_values_at_vllm_s_bounds_render() -> None:
    """vLLM takes a budget equal to max_num_seqs and a chunk cap equal to max_model_len."""
    knobs = {"max_num_seqs": 256, "max_num_batched_tokens": 256, "max_model_len": 8192}
    stack = parse_stack(stack_with(knobs={**knobs, "long_prefill_token_threshold": 8192}))
    assert render_stack(stack).files


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*/stack.yaml")))
def test_the_examples_pass_the_checks(example: Path) -> None:
    assert render_stack(load_stack(example)).files


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("namespace", 'prod"} or vector(1) #'),
        ("namespace", "Prod_NS"),
        ("namespace", "n" * 64),
        ("monitoring_namespace", "-monitoring"),
        ("dcgm_namespace", "gpu operator"),
    ],
)
def test_namespaces_must_be_kubernetes_names(field: str, value: str) -> None:
    with pytest.raises(SpecError, match=r"is not a Kubernetes namespace"):
        RenderOptions(**{field: value})  # type: ignore[arg-type]


def test_a_valid_namespace_is_used() -> None:
    rendered = render_stack(parse_stack(stack_with()), RenderOptions(namespace="prod-1"))
    assert "namespace: prod-1" in rendered.files["k8s/engine-chat.yaml"]


@pytest.mark.parametrize(
    ("model", "quant", "noted"),
    [
        ("llama-3.1-8b", "w4a16", True),  # a 16-bit checkpoint: vLLM would serve it at bf16
        ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", "awq", False),
        ("nvidia/Llama-3.1-8B-Instruct-FP4", "fp4", False),
        ("llama-3.1-8b", "fp8", False),  # rendered as --quantization fp8
        ("llama-3.1-8b", "bf16", False),
    ],
)
def test_a_checkpoint_quant_on_a_16_bit_name_is_noted(model: str, quant: str, noted: bool) -> None:
    notes = render_stack(parse_stack(stack_with(model=model, quant=quant))).notes
    assert any("renders no --quantization" in n for n in notes) is noted


# A tiny Llama's config.json (16-bit); an AWQ checkpoint's adds its quantization_config.
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 4,
    "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 2048,
}  # fmt: skip
AWQ = {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}


@pytest.mark.parametrize(
    ("name", "quantized", "noted"),
    [("tiny", True, False), ("Tiny-AWQ", False, True)],
    ids=["awq-checkpoint-plain-name", "16-bit-checkpoint-awq-name"],
)
def test_a_local_checkpoints_config_decides_the_quant_note_not_its_name(
    tmp_path: Path, name: str, quantized: bool, noted: bool
) -> None:
    """Where the checkpoint's config.json was read, it says whether the checkpoint is
    quantized: an AWQ checkpoint in a plainly named directory was noted as 16-bit, and a
    16-bit one named AWQ was not (it would load at 16 bits, more memory than planned)."""
    model = tmp_path / name
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**TINY_CONFIG, **(AWQ if quantized else {})}))
    stack_file = tmp_path / "stack.yaml"
    stack_file.write_text(json.dumps(stack_with(model=str(model), quant="w4a16")))
    notes = render_stack(load_stack(stack_file)).notes
    assert any("renders no --quantization" in n for n in notes) is noted

"""The GPU and model catalogs: every entry loads, names resolve, figures match the datasheets."""

from __future__ import annotations

import pytest

from inhouse.errors import SpecError
from inhouse.spec.catalog import (
    _load_yaml,
    _normalize,
    get_gpu,
    get_model,
    known_gpus,
    known_models,
)

# name -> (hbm_gb, hbm_bw_tbps, bf16_tflops, fp8_tflops, link_bw_gbps, power_w), dense figures.
GPU_FIGURES = {
    "h100_sxm": (80, 3.35, 989, 1979, 450, 700),
    "h100_pcie": (80, 2.0, 756, 1513, 64, 350),
    "h200_sxm": (141, 4.8, 989, 1979, 450, 700),
    "b200_sxm": (180, 8.0, 2250, 4500, 900, 1000),
    "b300_sxm": (270, 8.0, 2250, 4500, 900, 1100),
    "gb200": (186, 8.0, 2500, 5000, 900, 1200),
    "a100_sxm_80gb": (80, 2.039, 312, None, 300, 400),
    "a100_pcie_80gb": (80, 1.935, 312, None, 32, 300),
    "h20": (96, 4.0, 148, 296, 450, 400),
    "l40s": (48, 0.864, 362.05, 733, 32, 350),
    "l4": (24, 0.3, 121, 242.5, 32, 72),
    "mi300x": (192, 5.3, 1307.4, 2614.9, 448, 750),
}

# name -> (layers, hidden, heads, kv_heads, head_dim, intermediate, vocab, max_context)
MODEL_ARCH = {
    "Llama-3.1-8B": (32, 4096, 32, 8, 128, 14336, 128256, 131072),
    "Llama-3.1-70B": (80, 8192, 64, 8, 128, 28672, 128256, 131072),
    "Llama-3.3-70B": (80, 8192, 64, 8, 128, 28672, 128256, 131072),
    "Llama-3.2-1B": (16, 2048, 32, 8, 64, 8192, 128256, 131072),
    "Llama-3.2-3B": (28, 3072, 24, 8, 128, 8192, 128256, 131072),
    "Qwen2.5-7B": (28, 3584, 28, 4, 128, 18944, 152064, 32768),
    "Qwen2.5-72B": (80, 8192, 64, 8, 128, 29568, 152064, 32768),
    "Qwen3-8B": (36, 4096, 32, 8, 128, 12288, 151936, 40960),
    "Qwen3-14B": (40, 5120, 40, 8, 128, 17408, 151936, 40960),
    "Qwen3-32B": (64, 5120, 64, 8, 128, 25600, 151936, 40960),
    "Qwen3-235B-A22B": (94, 4096, 64, 4, 128, 1536, 151936, 40960),
    "phi-4": (40, 5120, 40, 10, 128, 17920, 100352, 16384),
    "Mistral-Large-2": (88, 12288, 96, 8, 128, 28672, 32768, 131072),
    "gpt-oss-120b": (36, 2880, 64, 8, 64, 2880, 201088, 131072),
    "gpt-oss-20b": (24, 2880, 64, 8, 64, 2880, 201088, 131072),
    "DeepSeek-R1": (61, 7168, 128, 128, 192, 2048, 129280, 163840),
    "DeepSeek-V3": (61, 7168, 128, 128, 192, 2048, 129280, 163840),
    "Kimi-K2.5": (61, 7168, 64, 64, 192, 2048, 163840, 262144),
    "MiniMax-M2.5": (62, 3072, 48, 8, 128, 1536, 200064, 196608),
    "GLM-5": (78, 6144, 64, 64, 256, 2048, 154880, 202752),
    "Qwen3.5-397B-A17B": (60, 4096, 32, 2, 256, 1024, 248320, 262144),
}

# Fields that are the same for two checkpoints of one architecture.
NON_ARCH_FIELDS = {
    "name",
    "hf_id",
    "instruct_hf_id",
    "aliases",
    "params_b_stated",
    "license",
    "source",
}


def _arch(name: str) -> tuple[int, ...]:
    m = get_model(name)
    return (
        m.num_layers,
        m.hidden_size,
        m.num_attention_heads,
        m.num_kv_heads,
        m.head_dim,
        m.intermediate_size,
        m.vocab_size,
        m.max_context,
    )


# --- GPUs ---------------------------------------------------------------------------------


def test_known_gpus_are_exactly_the_catalog() -> None:
    assert known_gpus() == sorted(GPU_FIGURES)


@pytest.mark.parametrize("name", sorted(GPU_FIGURES))
def test_gpu_figures(name: str) -> None:
    gpu = get_gpu(name)
    figures = (
        gpu.hbm_gb,
        gpu.hbm_bw_tbps,
        gpu.bf16_tflops,
        gpu.fp8_tflops,
        gpu.link_bw_gbps,
        gpu.power_w,
    )
    assert gpu.name == name
    assert figures == GPU_FIGURES[name]
    assert gpu.source.strip()


@pytest.mark.parametrize("name", sorted(GPU_FIGURES))
def test_gpu_figures_are_consistent(name: str) -> None:
    gpu = get_gpu(name)
    # A rack-scale NVLink domain (GB200 NVL72) spans nodes; otherwise it fits in one.
    assert gpu.nvlink_domain <= gpu.gpus_per_node or gpu.nvlink_domain == 72
    if gpu.fp8_tflops is not None:
        # 2% slack: the L40S datasheet prints BF16 362.05 but FP8 733.
        assert gpu.fp8_tflops == pytest.approx(2 * gpu.bf16_tflops, rel=0.02)
    if gpu.fp4_tflops is not None:
        assert gpu.fp8_tflops is not None
        # Blackwell Ultra (B300) runs dense FP4 at 3x its FP8 rate; Blackwell at 2x.
        assert gpu.fp4_tflops == (3 if name == "b300_sxm" else 2) * gpu.fp8_tflops
    if gpu.link.startswith("PCIe"):
        assert gpu.nvlink_domain == 1
        assert gpu.link_bw_gbps == gpu.host_bw_gbps


def test_gpu_names_resolve_leniently() -> None:
    assert get_gpu("H100-SXM") == get_gpu("h100_sxm")
    assert get_gpu("h100 sxm") == get_gpu("h100_sxm")
    assert get_gpu(" A100-SXM-80GB ") == get_gpu("a100_sxm_80gb")


def test_unknown_gpu_lists_known_names() -> None:
    with pytest.raises(SpecError, match="unknown GPU 'tpu-v5'") as info:
        get_gpu("tpu-v5")
    for name in GPU_FIGURES:
        assert name in str(info.value)


def test_peak_flops_exact_and_fallbacks() -> None:
    h100 = get_gpu("h100_sxm")
    assert h100.peak_flops("fp8") == 1979e12
    assert h100.peak_flops("bf16") == 989e12
    assert h100.peak_flops("int8") == 1979e12
    # No FP4 units: a 4-bit checkpoint is dequantized into 16-bit GEMMs, not FP8 ones.
    assert h100.peak_flops("fp4") == 989e12
    a100 = get_gpu("a100_sxm_80gb")
    assert a100.peak_flops("fp8") == 312e12  # no FP8 units: weight-only, bf16 math
    assert a100.peak_flops("int8") == 624e12
    assert get_gpu("b200_sxm").peak_flops("fp4") == 9000e12


@pytest.mark.parametrize(("name", "visible_mib"), [("h100_sxm", 81559), ("h200_sxm", 143771)])
def test_hbm_bytes_match_what_nvidia_smi_shows(name: str, visible_mib: int) -> None:
    assert get_gpu(name).hbm_bytes / 2**20 == pytest.approx(visible_mib, rel=2e-4)


def test_hbm_bandwidth_in_bytes() -> None:
    assert get_gpu("h200_sxm").hbm_bw_bytes_s == 4.8e12


# --- models -------------------------------------------------------------------------------


def test_known_models_are_exactly_the_catalog() -> None:
    assert known_models() == sorted(MODEL_ARCH)


@pytest.mark.parametrize("name", sorted(MODEL_ARCH))
def test_model_architecture(name: str) -> None:
    assert get_model(name).name == name
    assert _arch(name) == MODEL_ARCH[name]


def test_no_two_catalog_entries_share_a_name() -> None:
    """The table maps every normalized name to one entry; a collision would silently win."""
    owner: dict[str, str] = {}
    for entry in _load_yaml("models.yaml"):
        for key in {_normalize(k) for k in (entry["name"], entry["hf_id"], *entry["aliases"])}:
            assert key not in owner, f"{key!r} names both {owner[key]} and {entry['name']}"
            owner[key] = entry["name"]


@pytest.mark.parametrize(
    "name",
    [
        "meta-llama/Llama-3.1-70B",
        "Llama-3.1-70B",
        "llama-3.1-70b",
        "meta-llama/Llama-3.1-70B-Instruct",
        "Llama-3.1-70B-Instruct-FP8",
        "meta-llama/Meta-Llama-3.1-70B-Instruct",
        "llama3.1-70b",
        "llama3.1:70b",
    ],
)
def test_llama_31_70b_variants_resolve_to_one_entry(name: str) -> None:
    assert get_model(name) == get_model("meta-llama/Llama-3.1-70B")
    assert get_model(name).name == "Llama-3.1-70B"


def test_llama_33_70b_is_its_own_entry_with_the_31_architecture() -> None:
    llama33 = get_model("meta-llama/Llama-3.3-70B-Instruct")
    llama31 = get_model("Llama-3.1-70B")
    assert llama33.name == "Llama-3.3-70B"
    assert llama33 != llama31
    assert llama33.license == "Llama 3.3 Community License"
    assert llama33.model_dump(exclude=NON_ARCH_FIELDS) == llama31.model_dump(
        exclude=NON_ARCH_FIELDS
    )


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("Qwen/Qwen2.5-7B", "Qwen2.5-7B"),
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", "Qwen2.5-7B"),
        ("Qwen/Qwen3-32B-FP8", "Qwen3-32B"),
        ("mistralai/Mistral-Large-Instruct-2411", "Mistral-Large-2"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
        ("microsoft/phi-4", "phi-4"),
        ("phi4", "phi-4"),
        ("qwen3:235b", "Qwen3-235B-A22B"),
    ],
)
def test_common_names_resolve(alias: str, name: str) -> None:
    assert get_model(alias).name == name


def test_unknown_model_lists_known_names() -> None:
    with pytest.raises(SpecError, match="unknown model 'llama-70b'") as info:
        get_model("llama-70b")
    for name in MODEL_ARCH:
        assert name in str(info.value)


@pytest.mark.parametrize("name", sorted(MODEL_ARCH))
def test_computed_params_match_the_card(name: str) -> None:
    spec = get_model(name)
    assert spec.params_b_stated is not None
    assert spec.num_params / 1e9 == pytest.approx(spec.params_b_stated, rel=0.05)


@pytest.mark.parametrize(
    ("name", "active_b"),
    [
        ("DeepSeek-R1", 37),
        ("Kimi-K2.5", 32),
        ("MiniMax-M2.5", 10),
        ("GLM-5", 40),
        ("Qwen3.5-397B-A17B", 17),
    ],
)
def test_corpus_moe_active_params_match_the_card(name: str, active_b: float) -> None:
    """MLA, dense-first layers, shared experts and linear attention all counted."""
    assert get_model(name).num_active_params / 1e9 == pytest.approx(active_b, rel=0.06)


def test_mla_attention_params_of_deepseek() -> None:
    """q_a + q_b, kv_a (latent and rope key), kv_b (per-head nope key and value), o."""
    spec = get_model("DeepSeek-V3")
    q = 7168 * 1536 + 1536 * 128 * 192
    kv = 7168 * (512 + 64) + 512 * 128 * (128 + 128)
    assert spec.attention_params == q + kv + 128 * 128 * 7168


def test_linear_attention_layers_are_not_softmax_attention() -> None:
    spec = get_model("Qwen3.5-397B-A17B")
    assert (spec.num_full_attention_layers, spec.num_linear_attention_layers) == (15, 45)
    assert spec.linear_attention is not None
    # 64 value heads x 128 x 128 fp32 state, plus the 4-token convolution window
    assert spec.linear_attention.state_bytes_per_layer == (64 * 128 * 128 + 12288 * 4) * 4


def test_moe_active_params_match_the_card() -> None:
    qwen = get_model("Qwen3-235B-A22B")
    assert qwen.is_moe
    assert qwen.num_active_params / 1e9 == pytest.approx(22, rel=0.10)


@pytest.mark.parametrize(("name", "active_b"), [("gpt-oss-120b", 5.13), ("gpt-oss-20b", 3.61)])
def test_gpt_oss_active_params_match_openai(name: str, active_b: float) -> None:
    """OpenAI's active count leaves out the input embedding, a row lookup; so does ours."""
    assert get_model(name).num_active_params / 1e9 == pytest.approx(active_b, rel=0.01)


def test_dense_model_active_params_are_all_but_the_input_embedding() -> None:
    spec = get_model("Llama-3.1-8B")
    assert not spec.is_moe
    assert spec.num_active_params == spec.num_params - spec.vocab_size * spec.hidden_size


@pytest.mark.parametrize("name", sorted(MODEL_ARCH))
def test_models_have_licence_and_source(name: str) -> None:
    spec = get_model(name)
    assert spec.license.strip()
    assert spec.source.startswith(f"config.json of {spec.hf_id} on the Hugging Face Hub")


def test_a_stack_serves_the_instruct_checkpoint_and_the_family_has_a_tool_parser() -> None:
    # Meta publishes base and instruct checkpoints: a base model has no chat template, so a
    # pool serving it fails every chat request (the code-assistant plan's fallback did).
    for name in known_models():
        model = get_model(name)
        if model.hf_id.startswith("meta-llama/"):
            assert model.served_hf_id.endswith("-Instruct"), name
            assert model.tool_call_parser == "llama3_json", name
    assert get_model("Qwen2.5-7B").served_hf_id == "Qwen/Qwen2.5-7B-Instruct"
    assert get_model("Qwen3-8B").tool_call_parser == "hermes"
    assert get_model("phi-4").tool_call_parser is None

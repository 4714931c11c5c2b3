"""InferenceX's harness as the corpus's rows ran it: which rows are its runs, its benchmark
protocol, the launch knobs of its scripts, and what they ran where a row's label says
otherwise. Facts read from SemiAnalysisAI/InferenceX (`benchmarks/single_node/*.sh`, matched
to each row's image and date), not fitted; `inhouse.calibration.corpus` applies them when it
reads the corpus as each run's harness ran it (`prepare(..., harness=True)`).

* **Launch knobs.** The single-node InferenceX rows ran its launch scripts, matched to each
  row's image: vLLM with a token budget of
  8192 (passed, or vLLM's default for the API server on a GPU of 70 GiB or more; 2 x ISL for
  MiniMax-M2.5 on vLLM 0.19), its scripts' `--max-num-seqs` (C; 512 for Llama and gpt-oss
  on B200; 256 for MiniMax on H100; vLLM's 1,024 for MiniMax on B200) and an FP8 KV cache
  where they pass `--kv-cache-dtype fp8` (Llama; gpt-oss on B200 from 0.15.1; MiniMax FP8
  on B200 from 0.19); SGLang with chunked prefill of 16,384 tokens (DeepSeek FP4) or 32,768
  (DeepSeek FP8, Qwen3.5, GLM-5 FP8; 8,192 for DeepSeek FP8 at TP4; 131,072 for GLM-5
  FP4), `--max-running-requests` 256 (DeepSeek FP4), 128 (DeepSeek FP8, Qwen3.5; 32 at
  TP4) or C (GLM-5), `--kv-cache-dtype fp8_e4m3` (all but Qwen3.5 BF16 and GLM-5
  FP4) and `--mem-fraction-static` 0.85 (DeepSeek FP4, GLM-5 FP8, Qwen3.5 FP4), 0.82
  (DeepSeek FP8, Qwen3.5 FP8 and BF16; 0.95 for DeepSeek FP8 at TP4) or 0.80 (GLM-5 FP4),
  where the model otherwise derives SGLang's own (`inferencex_mem_fraction`), and
  `--scheduler-recv-interval` 30 from 16 clients and 10 below (DeepSeek, Qwen3.5; 10 at
  every concurrency for DeepSeek FP8 at TP4; none for GLM-5 or on H200: the scripts of
  2026-01-13 to 2026-04-30, `inferencex_recv_interval`): after a decode step SGLang then
  takes new requests only every 10th or 30th step, so a prompt waits about half that many
  decode steps before its prefill. These are facts of the protocol, not fitted
  (`inferencex_knobs`). InferenceX's GB200 rows ran a
  multi-node disaggregated recipe that is not matched; they keep the generator's rules.

* **The benchmark protocol of each run's harness** (`corpus_protocol`; read so, with the
  launch knobs below, by `prepare(..., harness=True)`, `--corpus-protocol harness`). The rows
  come from two harnesses. Most are SemiAnalysis InferenceX sweeps (the ids that start with a
  date or end in `_cfgN`, matching InferenceX's database dump): `INFERENCEX_SWEEP`, ten waves
  from an idle server, every prompt and output length uniform on [0.8 L, L]. Its GB200 rows
  ran through srt-slurm's sa-bench (five waves, the same length range). The `gap_analysis` and
  Qwen3-32B rows come from aiconfigurator's own gap analysis, whose harness is not public;
  they keep `AIPERF_SILICON` (aiconfigurator's generator: aiperf, twenty waves after a drained
  warm-up, exact lengths), as does any other id.
* **What InferenceX's scripts ran where the label says otherwise** (the harness reading;
  each row's note says which): Kimi-K2.5 FP4 "ep4" on vLLM 0.17.0 (B200, B300) ran plain
  TP (those scripts ignore EP_SIZE; later ones pass it); MiniMax-M2.5 FP8 on vLLM 0.17 "ep1"
  on B200 ran expert parallel (passed whenever EP_SIZE >= 1).
  Runs of its speculative-decoding (MTP) configurations labelled plain serving are left out
  (`Corpus.excluded`), since the model has no speculative decoding: Qwen3.5 FP8 at TP4
  without EP (only `qwen3.5-fp8-b200-sglang-mtp` ran it) and DeepSeek FP8 at TP8 on SGLang
  0.5.9, whose dated dumps hold two series per point (C 128 to 512 only in
  `dsr1-fp8-b200-sglang-mtp`), except the runs the plain configuration's `_cfgN` export
  lists. So are the B200 DeepSeek runs on SGLang images before 0.5.6 (the rows give no version;
  the FP4 ones "ep1" also ran `--enable-ep-moe`): InferenceX's client sent no warm-up before
  2026-01-21, and the FP4 ones' TTFTs carry a one-time cost of several seconds that the
  same configurations, warmed up on 0.5.9, do not show (the FP8 ones, TP8 EP8, were not
  rerun warmed up; they are left out on the same fact).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from inhouse.predict import AIPERF_SILICON, INFERENCEX_SWEEP, BenchmarkProtocol

if TYPE_CHECKING:
    from inhouse.calibration.corpus import CorpusRow

# InferenceX's rows: ids that start with a date (its dumps' file names) or end in its config id.
_INFERENCEX_ID = re.compile(r"^\d{4}_\d{2}_\d{2}_|_cfg\d+$")
# Its `_cfgN` export's ids: N is the configuration's id in its export.
CONFIG_EXPORT = re.compile(r"_cfg\d+$")


def is_inferencex(row_id: str) -> bool:
    """Whether a row id is one of InferenceX's runs (a dated dump's or its `_cfgN` export's)."""
    return _INFERENCEX_ID.search(row_id) is not None


# srt-slurm's sa-bench (InferenceX's GB200 runs): `num_prompts = 5C`, the same length range.
SA_BENCH = BenchmarkProtocol(waves=5, warmup_drains=True, min_length_ratio=0.8)


def corpus_protocol(row_id: str, gpu: str) -> BenchmarkProtocol:
    """The protocol of the harness that measured a row (see the module docstring)."""
    if not is_inferencex(row_id):
        return AIPERF_SILICON
    if gpu == "gb200":
        return SA_BENCH
    return INFERENCEX_SWEEP


def inferencex_knobs(
    model: str, gpu: str, backend: str, precision: str, version: str, tp: int, isl: int, conc: int
) -> dict[str, object]:
    """The engine knobs InferenceX's launch scripts gave a run (see the module docstring)."""
    if backend == "vllm":
        seqs = {("Llama-3.1-70B", "b200_sxm"): 512, ("gpt-oss-120b", "b200_sxm"): 512,
                ("MiniMax-M2.5", "h100_sxm"): 256, ("MiniMax-M2.5", "b200_sxm"): 1024}  # fmt: skip
        minimax_019 = model == "MiniMax-M2.5" and gpu == "b200_sxm" and version == "0.19.0"
        knobs: dict[str, object] = {
            "max_num_batched_tokens": 2 * isl if minimax_019 else 8192,
            "max_num_seqs": seqs.get((model, gpu), conc),
        }
        if (
            model == "Llama-3.1-70B"
            or (model == "gpt-oss-120b" and gpu == "b200_sxm" and version == "0.15.1")
            or (minimax_019 and precision == "fp8")
        ):
            knobs["kv_cache_dtype"] = "fp8"
        return knobs
    deepseek = model in ("DeepSeek-R1", "DeepSeek-V3")
    if deepseek and precision == "fp4":
        chunk, running = 16384, 256
    elif deepseek:
        chunk, running = (8192, 32) if tp == 4 else (32768, 128)
    elif model == "Qwen3.5-397B-A17B":
        chunk, running = 32768, 128
    else:  # GLM-5
        chunk, running = (131072 if precision == "fp4" else 32768), conc
    bf16_kv = (model == "Qwen3.5-397B-A17B" and precision == "bf16") or (
        model == "GLM-5" and precision == "fp4"
    )
    return {
        "enable_chunked_prefill": True,
        "max_num_batched_tokens": chunk,
        "max_num_seqs": running,
        "kv_cache_dtype": "auto" if bf16_kv else "fp8",
    }


def inferencex_recv_interval(model: str, gpu: str, precision: str, tp: int, conc: int) -> int:
    """The `--scheduler-recv-interval` InferenceX's SGLang scripts passed (module docstring)."""
    if model == "GLM-5" or gpu == "h200_sxm":
        return 1  # glm5_fp8/fp4_b200.sh and the H200 scripts of 2026-03/04 pass none
    if model in ("DeepSeek-R1", "DeepSeek-V3") and precision == "fp8" and tp == 4:
        return 10  # dsr1_fp8_b200.sh's (and _b300.sh's) TP 4 branch, at every concurrency
    if model == "Qwen3.5-397B-A17B" and precision == "fp8" and gpu == "b300_sxm":
        return 10  # qwen3.5_fp8_b300.sh (from 2026-04-17) passes 10 at every concurrency
    # dsr1_fp8_b200.sh (TP 8), dsr1_fp4_b200.sh and the Qwen3.5 scripts of 2026-01-13 to
    # 2026-04-30, and the B300 scripts as first added (2026-04-17): 30 from 16 clients,
    # else 10.
    return 30 if conc >= 16 else 10


def inferencex_mem_fraction(model: str, precision: str, tp: int) -> float:
    """The `--mem-fraction-static` InferenceX's SGLang scripts pass (module docstring)."""
    if model in ("DeepSeek-R1", "DeepSeek-V3"):
        return 0.85 if precision == "fp4" else (0.95 if tp == 4 else 0.82)
    if model == "GLM-5":
        return 0.80 if precision == "fp4" else 0.85
    # Qwen3.5-397B-A17B: qwen3.5_fp4_b200.sh passes 0.85; the FP8 and BF16 scripts 0.82.
    return 0.85 if precision == "fp4" else 0.82


def script_layout(row: dict[str, str], layout: dict[str, int]) -> tuple[dict[str, int], str]:
    """The layout InferenceX's launch script ran where its label says otherwise (module
    docstring), with a note; the label's layout and "" elsewhere."""
    model, backend = row["model"].strip(), row["backend"].strip().lower()
    precision, version = row["precision"].strip(), (row.get("backend_version") or "").strip()
    gpu, tp = row["system"].strip(), layout["tp"]
    why = ""
    # Read: kimik2.5_fp4_b200.sh on vLLM 0.17.0 and kimik2.5_fp4_b300.sh (its copy, 0.17.0
    # and 0.19.0 until 2026-06-03); InferenceX's later Kimi scripts pass the flag for EP > 1.
    kimi_read = gpu in ("b200_sxm", "b300_sxm") and version == "0.17.0"
    kimi = (model, backend, precision) == ("Kimi-K2.5", "vllm", "fp4") and kimi_read
    if kimi and layout["moe_ep"] > 1:
        why = "its script ignores EP_SIZE (no --enable-expert-parallel): plain TP"
        fixed = {**layout, "moe_tp": tp, "moe_ep": 1}
    elif (model, gpu, backend, precision, version) == (
        "MiniMax-M2.5",
        "b200_sxm",
        "vllm",
        "fp8",
        "0.17.0",
    ) and layout["moe_ep"] < tp:
        why = "its script passes --enable-expert-parallel whenever EP_SIZE >= 1"
        fixed = {**layout, "moe_tp": 1, "moe_ep": tp}
    if not why:
        return layout, ""
    note = f"layout ep{layout['moe_ep']} run as ep{fixed['moe_ep']} (InferenceX: {why})"
    return fixed, note


def not_serving(row: CorpusRow, version: str, copies: list[str]) -> str:
    """Why an InferenceX run does not measure what its label says the model serves, or "":
    a run of a speculative-decoding (MTP) configuration labelled plain, or a cold server
    (module docstring). `version`: the engine's, as the row gives it; `copies`: the ids of
    every copy of the run."""
    spec = row.spec
    if row.protocol is not INFERENCEX_SWEEP or spec.backend != "sglang":
        return ""
    fp8 = spec.quant == "fp8"
    # Matched to the B200 configurations and images only; other GPUs' were not read.
    b200 = spec.gpu == "b200_sxm"
    if fp8 and b200 and spec.model == "Qwen3.5-397B-A17B" and (spec.tp, spec.moe_ep) == (4, 1):
        return (
            "speculative decoding: InferenceX ran Qwen3.5 FP8 at TP4 without expert "
            "parallelism only as qwen3.5-fp8-b200-sglang-mtp (EAGLE, 3 steps)"
        )
    deepseek = spec.model in ("DeepSeek-R1", "DeepSeek-V3")
    if deepseek and b200 and not version:
        return (
            "measured cold: SGLang 0.5.3 and 0.5.5 images (the rows give no version), run by "
            "InferenceX's client before 2026-01-21, which sent no warm-up; the one-time costs "
            "a warm-up absorbs are in the means (FP4: TTFT mostly 5 to 9 s from 32 clients, or "
            "from 4 at 8k prompts, where the same configurations on 0.5.9, warmed up, take 0.2 "
            "to 2.6 s; FP8 TP8 EP8, not rerun warmed up: 1.6 to 3.7 s at 64 clients or 8k "
            "prompts), a cost of starting the server, not of serving"
        )
    mtp_era = version == "0.5.9"  # the MTP configuration ran from 0.5.8; the rows say 0.5.9
    if (
        deepseek
        and fp8
        and mtp_era
        and b200
        and (spec.tp, spec.moe_ep) == (8, 1)
        and not any(CONFIG_EXPORT.search(c) for c in copies)
    ):
        return (
            "speculative decoding or not told apart from it: the dated dumps mix "
            "dsr1-fp8-b200-sglang-mtp's runs into TP8 EP1 (two series per point, C 128 "
            "to 512 only in MTP); the plain configuration's runs are those its `_cfgN` "
            "export lists"
        )
    return ""

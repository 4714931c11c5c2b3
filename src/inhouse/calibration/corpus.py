"""The calibration corpus as the model reads it: every row's replica, shape and measurement.

NVIDIA aiconfigurator's silicon corpus (data/calibration_silicon.csv) records, per run, the
model, GPU, engine, parallel layout, quantization, benchmark shape and mean TTFT and TPOT. Its
rows are read here once, by rules that are the same for every row and are each reported:

* **Layouts named by the run's own flags.** A row id that names the engine flags
  (`..._tp4_ep4_...`, `..._tp4_0_ep4_0_...`) gives the GPUs the run used: both engines place
  experts on the tensor-parallel ranks (SGLang's `--ep-size` divides `--tp-size`; vLLM's
  `--enable-expert-parallel` spreads experts over the TP ranks), so `tpN_epM` is N GPUs with
  `moe_ep = M`. One dump of the corpus multiplies tp by ep in its labels (tp16 for a tp4_ep4
  run; for vLLM it writes ep as attention DP), which the same measurement, listed again under
  the other dump's label, contradicts. A label whose GPU count differs from the id's is
  corrected to the id's. Under an id that names no layout (`..._cfgN`), that dump's vLLM
  encoding (tp T, attention DP E, ep T x E, as its named copies show) is read as `tpT_epE`,
  but for InferenceX's configurations run with attention DP (`dp-attn: true`, which that
  encoding does not tell apart: `VLLM_DP_ATTENTION_CONFIGS`), read as attention DP T, EP T.
* **One run, one row.** Rows with the same architecture, GPU, engine, precision, shape and
  the same TTFT and TPOT to the precision each copy is written with are one run listed
  several times (DeepSeek-V3 and DeepSeek-R1 share an architecture; some runs appear in
  three dumps). The Kimi-K2.5 and Qwen3.5 `gap_analysis` rows are all such copies of
  InferenceX's runs, rounded to 0.01 ms (338.336 written 338.340); no dump is coarser, so
  a value written "45.000" is taken to 0.01 ms, not to the ms. One is kept: InferenceX's
  own (its harness ran it), then a copy whose id names its layout, then the one with the
  most digits; where the kept copy's id names no layout, a copy's that does gives it.
* **KV cache dtype from the checkpoint.** NVIDIA's ModelOpt checkpoints declare an FP8 KV
  cache (`kv_cache_quant_algo: FP8` in hf_quant_config.json): every NVFP4 release and the FP8
  Llama-3.1-70B (nvidia/Llama-3.1-70B-Instruct-FP8); the runs use it. Everyone else's
  checkpoints (DeepSeek's and MiniMax's FP8, Qwen's, OpenAI's MXFP4) keep a 16-bit cache.
* **Engine knobs of the harness.** aiconfigurator deploys the engine it benchmarks with
  its generator's rules (generator/rule_plugin/benchmark/*.rule): vLLM gets
  `--max-num-seqs C`, `--max-num-batched-tokens C + ISL + 1500` and `--max-model-len
  ISL + OSL + 1500`; SGLang gets `--max-running-requests C`, `--max-prefill-tokens
  ISL + 1500`, its default chunked prefill (8K tokens and more on these GPUs, longer than
  every such prompt, so read as none) and `--enable-mixed-chunk`, which the model does not
  apply (its SGLang batches prefill apart from decode: `mixed_batches`). Those rules are
  read for the gap-analysis rows, whose own harness is not public. The single-node
  InferenceX rows ran its launch scripts (`benchmarks/single_node/*.sh` in
  SemiAnalysisAI/InferenceX, matched to each row's image): vLLM with a token budget of
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

`prepare` is pure: the caller reads the CSV.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from inhouse.engine.build import ReplicaSpec
from inhouse.errors import SpecError
from inhouse.predict import AIPERF_SILICON, INFERENCEX_SWEEP, BenchmarkProtocol
from inhouse.spec.catalog import get_model
from inhouse.spec.knobs import VLLM_SERVE_DEFAULTS

# Headroom the generator adds to the prompt for the token budget and the context.
HARNESS_HEADROOM_TOKENS = 1500
# InferenceX's rows: ids that start with a date (its dumps' file names) or end in its config id.
_INFERENCEX_ID = re.compile(r"^\d{4}_\d{2}_\d{2}_|_cfg\d+$")
_CONFIG_EXPORT = re.compile(r"_cfg\d+$")
_ID_CONCURRENCY = re.compile(r"_c(\d+)_")
_ID_LAYOUT = re.compile(r"_tp(\d+)(?:_0)?_ep(\d+|none)(?:_0)?_")
# InferenceX's vLLM configurations with `dp-attn: true` in its export, (model, precision, GPU,
# config id): the dump labels them as their `tp: T, ep: E` twin. minimaxm2.5-fp4-b200-vllm's
# 1k/1k `{tp: 2, ep: 2, dp-attn: true}` (C 512 from 2026-04-08, C 256-1024 from 04-21) is
# config 707, the only one of C 512 and 1024 at 1k/1k (its plain twin, 706: C 128-256).
VLLM_DP_ATTENTION_CONFIGS = {("MiniMax-M2.5", "fp4", "b200_sxm", "707")}
# Checkpoints that declare an FP8 KV cache: (model, precision) -> evidence.
FP8_KV_CHECKPOINTS = {
    ("Llama-3.1-70B", "fp8"): "nvidia/Llama-3.1-70B-Instruct-FP8: kv_cache_quant_algo FP8",
}
FAMILIES = {
    "Llama-3.1-70B": "llama-dense",
    "Qwen3-32B": "qwen3-dense",
    "gpt-oss-120b": "gpt-oss",
    "MiniMax-M2.5": "minimax",
    "DeepSeek-R1": "deepseek",
    "DeepSeek-V3": "deepseek",
    "Kimi-K2.5": "kimi",
    "GLM-5": "glm",
    "Qwen3.5-397B-A17B": "qwen3.5",
}


# srt-slurm's sa-bench (InferenceX's GB200 runs): `num_prompts = 5C`, the same length range.
SA_BENCH = BenchmarkProtocol(waves=5, warmup_drains=True, min_length_ratio=0.8)


def corpus_protocol(row_id: str, gpu: str) -> BenchmarkProtocol:
    """The protocol of the harness that measured a row (see the module docstring)."""
    if not _INFERENCEX_ID.search(row_id):
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


def regime(concurrency: int) -> str:
    """Concurrency regime: a few clients, a busy batch, or beyond most engines' sweet spot."""
    if concurrency <= 16:
        return "c<=16"
    if concurrency <= 128:
        return "c32-128"
    return "c>=256"


@dataclass(frozen=True, slots=True)
class CorpusRow:
    """One measured run, resolved to the replica and shape the model predicts."""

    row_id: str
    spec: ReplicaSpec
    isl: int
    osl: int
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    family: str
    notes: tuple[str, ...] = ()
    protocol: BenchmarkProtocol = AIPERF_SILICON

    def simulated_protocol(self, dephased_start: bool = False) -> BenchmarkProtocol:
        """The protocol the row is simulated under: the one it was read with, its clients
        entering de-phased if `dephased_start`."""
        return replace(self.protocol, dephased_start=dephased_start)

    @property
    def backend(self) -> str:
        return self.spec.backend

    @property
    def gpu(self) -> str:
        return self.spec.gpu

    @property
    def regime(self) -> str:
        return regime(self.concurrency)


@dataclass
class Corpus:
    """The rows kept and what was done to the others."""

    rows: list[CorpusRow]
    duplicates: list[tuple[str, str]] = field(default_factory=list)  # (dropped, kept)
    corrected: list[tuple[str, str]] = field(default_factory=list)  # (id, what)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (id, why)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # (id, why): not what it says


def _int(row: dict[str, str], name: str, default: int) -> int:
    text = (row.get(name) or "").strip()
    return int(text) if text else default


def _layout(row: dict[str, str]) -> tuple[dict[str, int], str]:
    """(layout fields, correction note or "") from the labels and the id."""
    tp = _int(row, "tp", 1)
    fields = {
        "tp": tp,
        "attention_dp": _int(row, "attention_dp", 1),
        "moe_tp": _int(row, "moe_tp", 0),
        "moe_ep": _int(row, "moe_ep", 0),
        "pp": _int(row, "pp", 1),
    }
    match = _ID_LAYOUT.search(row.get("id", ""))
    dp, ep = fields["attention_dp"], fields["moe_ep"]
    if match is None:
        vllm = (row.get("backend") or "").strip().lower() == "vllm"
        config = _CONFIG_EXPORT.search(row.get("id", ""))
        dp_attention = config is not None and (
            (row.get("model") or "").strip(), (row.get("precision") or "").strip(),
            (row.get("system") or "").strip(), config.group(0)[len("_cfg"):],
        ) in VLLM_DP_ATTENTION_CONFIGS  # fmt: skip
        if vllm and dp_attention and ep == tp * dp:
            # `--tensor-parallel-size 1 --data-parallel-size T --enable-expert-parallel`.
            note = (f"layout tp{tp}/dp{dp}/moe_tp1/ep{ep} read as attention DP {tp} with EP "
                    f"{tp}: InferenceX's `dp-attn: true` configuration")  # fmt: skip
            return {
                "tp": 1,
                "attention_dp": tp,
                "moe_tp": 1,
                "moe_ep": tp,
                "pp": fields["pp"],
            }, note
        if not (vllm and dp > 1 and fields["moe_tp"] == 1 and ep == tp * dp and tp % dp == 0):
            return fields, ""
        # The multiplying dump's vLLM encoding of `tpT_epE` (attention DP E, ep T x E),
        # under an id that does not name it: its named copies show the encoding.
        corrected = {"tp": tp, "attention_dp": 1, "moe_tp": tp // dp, "moe_ep": dp}
        note = f"layout tp{tp}/dp{dp}/moe_tp1/ep{ep} read as tp{tp}/ep{dp}, the dump's encoding"
        return {**corrected, "pp": fields["pp"]}, note
    id_tp = int(match.group(1))
    id_ep = 1 if match.group(2) == "none" else int(match.group(2))
    if tp * fields["attention_dp"] == id_tp:
        return fields, ""
    corrected = {"tp": id_tp, "attention_dp": 1, "moe_tp": id_tp // id_ep, "moe_ep": id_ep}
    note = (
        f"layout tp{tp}/dp{fields['attention_dp']}/moe_tp{fields['moe_tp']}/"
        f"ep{fields['moe_ep']} corrected to tp{id_tp}/ep{id_ep} from its id"
    )
    return {**corrected, "pp": fields["pp"]}, note


def _kv_dtype(model: str, precision: str, gemm_quant: str) -> str:
    if gemm_quant == "nvfp4" and model != "gpt-oss-120b":
        return "fp8"  # NVIDIA's NVFP4 releases declare kv_cache_quant_algo FP8
    return "fp8" if (model, precision) in FP8_KV_CHECKPOINTS else "auto"


def _spec(row: dict[str, str], layout: dict[str, int], protocol: BenchmarkProtocol) -> ReplicaSpec:
    model = get_model(row["model"].strip()).name
    backend = row["backend"].strip().lower()
    precision = row["precision"].strip()
    gemm_quant = (row.get("gemm_quant") or "").strip()
    isl, osl, conc = (_int(row, n, 0) for n in ("isl", "osl", "concurrency"))
    knobs: dict[str, object] = {
        "max_num_seqs": conc,
        "kv_cache_dtype": _kv_dtype(model, precision, gemm_quant),
    }
    if backend == "vllm":
        knobs["max_num_batched_tokens"] = conc + isl + HARNESS_HEADROOM_TOKENS
        knobs["max_model_len"] = isl + osl + HARNESS_HEADROOM_TOKENS
    else:
        knobs["max_num_batched_tokens"] = isl + HARNESS_HEADROOM_TOKENS
        knobs["enable_chunked_prefill"] = False
    # The launch knobs are InferenceX's single-node scripts'; its GB200 runs (sa-bench, a
    # multi-node recipe not matched) keep the generator's rules, as any unknown launch does.
    mem_fraction = None
    recv_interval = 1
    if protocol is INFERENCEX_SWEEP:
        version = (row.get("backend_version") or "").strip()
        knobs.update(inferencex_knobs(model, row["system"].strip(), backend, precision, version,
                                      layout["tp"], isl, conc))  # fmt: skip
        if backend == "sglang":
            mem_fraction = inferencex_mem_fraction(model, precision, layout["tp"])
            recv_interval = inferencex_recv_interval(
                model, row["system"].strip(), precision, layout["tp"], conc
            )
    return ReplicaSpec(
        model,
        row["system"].strip(),
        layout["tp"],
        precision,
        backend,
        VLLM_SERVE_DEFAULTS.model_copy(update=knobs),
        attention_dp=layout["attention_dp"],
        moe_tp=layout["moe_tp"],
        moe_ep=layout["moe_ep"],
        pp=layout["pp"],
        gemm_quant=gemm_quant,
        moe_quant=(row.get("moe_quant") or "").strip(),
        mem_fraction_static=mem_fraction,
        scheduler_recv_interval=recv_interval,
    )


def _arch(model: str) -> str:
    """Models that share every architecture field (DeepSeek-V3 and R1) share a key."""
    spec = get_model(model)
    dump = spec.model_dump(exclude={"name", "hf_id", "aliases", "license", "source"})
    return repr(sorted(dump.items()))


def _decimals(text: str) -> int:
    """Digits after the point, trailing zeros not counted: the gap-analysis dumps write
    InferenceX's 338.336 ms as 338.340."""
    text = text.strip()
    return len(text.rstrip("0")) - text.index(".") - 1 if "." in text else 0


# The coarsest any dump of the corpus writes a time (the gap analysis's 0.01 ms). A value
# whose last written digits are zeros ("45.000") is no coarser than that: its zeros are
# digits, not padding, wherever they are not the gap-analysis dump's.
_COARSEST_DECIMALS = 2


def _same_measurement(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """Whether two (TTFT, TPOT) texts are one measurement written to different precisions."""
    for x, y in zip(a, b, strict=True):
        decimals = max(_COARSEST_DECIMALS, min(_decimals(x), _decimals(y)))
        tolerance = 0.5 * 10.0**-decimals + 1e-9
        if abs(float(x) - float(y)) > tolerance:
            return False
    return True


def _inferencex_layout(row: dict[str, str], layout: dict[str, int]) -> tuple[dict[str, int], str]:
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


def _concurrency(row: dict[str, str]) -> tuple[dict[str, str], str]:
    """The row with the run's concurrency where the dump wrote aiconfigurator's batch per
    attention-DP rank (its InferenceX adapter: `concurrency // (replicas * attention_dp)`),
    which the id's `_cN_` and the attention-DP label give back; with a note, or "" and the
    row as it is."""
    match = _ID_CONCURRENCY.search(row.get("id") or "")
    column, dp = _int(row, "concurrency", 0), _int(row, "attention_dp", 1)
    if match is None or dp <= 1 or column * dp != int(match.group(1)):
        return row, ""
    note = f"concurrency {column} read as {match.group(1)} from its id (the batch per DP rank)"
    return {**row, "concurrency": match.group(1)}, note


def _read(
    index: int, row: dict[str, str], harness: bool, named: dict[str, int] | None = None
) -> tuple[CorpusRow, tuple[object, ...], tuple[str, str]]:
    """A row resolved, the key of the runs it may repeat, and its measurement as written;
    `named`: the layout a copy's id names, in place of the row's own labels."""
    row_id = (row.get("id") or f"row{index + 2}").strip()
    row, conc_note = _concurrency(row)
    layout, note = _layout(row) if named is None else (named, "")
    protocol = corpus_protocol(row_id, row["system"].strip()) if harness else AIPERF_SILICON
    notes = [n for n in (conc_note, note) if n]
    if protocol is INFERENCEX_SWEEP:
        layout, run_note = _inferencex_layout(row, layout)
        notes += [run_note] if run_note else []
    spec = _spec(row, layout, protocol)
    isl, osl, conc = (_int(row, n, 0) for n in ("isl", "osl", "concurrency"))
    written = (row["ttft_ms"].strip(), row["tpot_ms"].strip())
    ttft, tpot = float(written[0]), float(written[1])
    for name, value in (("ttft_ms", ttft), ("tpot_ms", tpot)):
        if not (math.isfinite(value) and value > 0):
            # NaN would match every run as its copy; the rest cannot be a measured time.
            raise ValueError(f"{name}={value}: a measured time is a positive number of ms")
    key = (_arch(spec.model), spec.gpu, spec.backend, spec.quant, isl, osl, conc)
    family = FAMILIES.get(spec.model, spec.model.lower())
    resolved = CorpusRow(row_id, spec, isl, osl, conc, ttft, tpot, family, tuple(notes), protocol)
    return resolved, key, written


def _preference(member: tuple[CorpusRow, tuple[str, str]]) -> tuple[bool, bool, int]:
    """Which copy of a run is kept: InferenceX's own (the others are its copies, and its
    harness ran it), then one whose id names its layout, then the most digits."""
    row, written = member
    return (
        _INFERENCEX_ID.search(row.row_id) is not None,
        _ID_LAYOUT.search(row.row_id) is not None,
        sum(_decimals(text) for text in written),
    )


def _with_named_layout(
    kept: CorpusRow, members: list[CorpusRow], raw: list[dict[str, str]], at: dict[str, int],
    harness: bool,
) -> CorpusRow:  # fmt: skip
    """The kept copy read with the layout of a copy whose id names it, where its own id
    does not (the multiplying dump's labels are not the run's GPUs)."""
    named = next((m for m in members if _ID_LAYOUT.search(m.row_id)), None)
    if named is None or _ID_LAYOUT.search(kept.row_id):
        return kept
    fields, _ = _layout(_concurrency(raw[at[named.row_id]])[0])
    resolved = _read(at[kept.row_id], raw[at[kept.row_id]], harness, fields)[0]
    before = (kept.spec.tp, kept.spec.attention_dp, kept.spec.moe_tp, kept.spec.moe_ep)
    after = (fields["tp"], fields["attention_dp"], fields["moe_tp"], fields["moe_ep"])
    if before == after:
        return kept
    note = "layout tp{}/dp{}/moe_tp{}/ep{} read as tp{}/dp{}/moe_tp{}/ep{}".format(*before, *after)
    return replace(
        resolved, notes=(f"{note}, as its copy {named.row_id} names it", *resolved.notes)
    )


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
        and not any(_CONFIG_EXPORT.search(c) for c in copies)
    ):
        return (
            "speculative decoding or not told apart from it: the dated dumps mix "
            "dsr1-fp8-b200-sglang-mtp's runs into TP8 EP1 (two series per point, C 128 "
            "to 512 only in MTP); the plain configuration's runs are those its `_cfgN` "
            "export lists"
        )
    return ""


def prepare(raw: list[dict[str, str]], harness: bool = False) -> Corpus:
    """Resolve, correct and de-duplicate the corpus's rows (see the module docstring).

    `harness`: read each row as its harness ran it (`corpus_protocol`, `inferencex_knobs`,
    the layouts its scripts ran, its speculative-decoding runs left out); without it every
    row is read as aiconfigurator's generator runs (`AIPERF_SILICON` and its engine rules),
    the reading the shipped constants were fitted under.

    Copies of one run (the same shape and the same TTFT and TPOT to the precision each copy
    was written with) are kept once: `_preference`'s copy, with the layout a copy's id names
    where its own does not.
    """
    corpus = Corpus(rows=[])
    groups: dict[tuple[object, ...], list[list[tuple[CorpusRow, tuple[str, str]]]]] = {}
    order: dict[str, int] = {}
    for index, row in enumerate(raw):
        try:
            resolved, key, written = _read(index, row, harness)
            order.setdefault(resolved.row_id, index)
        except (SpecError, ValueError, KeyError, AttributeError) as exc:
            corpus.unreadable.append(((row.get("id") or f"row{index + 2}"), str(exc)))
            continue
        runs = groups.setdefault(key, [])
        # One run's copies are each other's: a rounded copy within reach of two runs
        # written finer joins one of them and does not merge them.
        run = next((r for r in runs if all(_same_measurement(m[1], written) for m in r)), None)
        if run is None:
            runs.append([(resolved, written)])
        else:
            run.append((resolved, written))
    kept_at: dict[str, int] = {}
    for runs in groups.values():
        for members in runs:
            kept = max(members, key=_preference)[0]
            copies = [m for m, _ in members]
            kept = _with_named_layout(kept, copies, raw, order, harness)
            corpus.duplicates.extend(
                (m.row_id, kept.row_id) for m in copies if m.row_id != kept.row_id
            )
            version = (raw[order[kept.row_id]].get("backend_version") or "").strip()
            why = not_serving(kept, version, [m.row_id for m in copies])
            if why:
                corpus.excluded.append((kept.row_id, why))
                continue
            corpus.rows.append(kept)
            kept_at[kept.row_id] = order[members[0][0].row_id]
    corpus.rows.sort(key=lambda r: kept_at[r.row_id])  # the order of each run's first copy
    corpus.corrected = [(r.row_id, note) for r in corpus.rows for note in r.notes]
    return corpus

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
  InferenceX rows ran its launch scripts: `inhouse.calibration.inferencex`.

* **The harness of each run** and what InferenceX's scripts ran where a label says
  otherwise: `inhouse.calibration.inferencex`.

`prepare` is pure: the caller reads the CSV.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from inhouse.calibration.inferencex import (
    CONFIG_EXPORT,
    SA_BENCH,
    corpus_protocol,
    inferencex_knobs,
    inferencex_mem_fraction,
    inferencex_recv_interval,
    is_inferencex,
    not_serving,
    script_layout,
)
from inhouse.engine.build import ReplicaSpec
from inhouse.errors import SpecError
from inhouse.predict import AIPERF_SILICON, INFERENCEX_SWEEP, BenchmarkProtocol
from inhouse.spec.catalog import get_model
from inhouse.spec.knobs import VLLM_SERVE_DEFAULTS

__all__ = [
    "FAMILIES",
    "HARNESS_HEADROOM_TOKENS",
    "SA_BENCH",
    "Corpus",
    "CorpusRow",
    "corpus_protocol",
    "inferencex_knobs",
    "inferencex_mem_fraction",
    "inferencex_recv_interval",
    "not_serving",
    "prepare",
    "regime",
]

# Headroom the generator adds to the prompt for the token budget and the context.
HARNESS_HEADROOM_TOKENS = 1500
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
        config = CONFIG_EXPORT.search(row.get("id", ""))
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
        layout, run_note = script_layout(row, layout)
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
        is_inferencex(row.row_id),
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

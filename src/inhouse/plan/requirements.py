"""The requirements file: what `inhouse plan` sizes a stack for (schema version 1).

A requirements file states workloads (traffic, lengths, prefix reuse, multi-turn shape), their
SLOs, the models and quantizations allowed, the hardware on offer with its prices, API prices to
compare against, and the planner's own knobs. docs/plan.md documents every field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from inhouse.errors import SpecError
from inhouse.routing.registry import policy_names
from inhouse.spec.base import SpecModel
from inhouse.spec.catalog import get_gpu
from inhouse.spec.errors_format import describe_validation_error
from inhouse.spec.quant import kv_dtype_bytes, normalize_quant

REQUIREMENTS_VERSION = 1
# The cost sheet's month: the stack is paid for 8,760 h a year.
HOURS_PER_MONTH = 8760.0 / 12.0

WorkloadKind = Literal["agent", "utility", "longctx", "shared-prefix"]
# Counts the generators build one by one before the first request (sessions, apps' system
# prompts, prefix groups): a stray digit (1e9) hung `inhouse plan` while it characterized the
# workload. A pool holds at most 64 replicas, so a count past these is no plan anyway.
MAX_SESSIONS = 100_000
MAX_PREFIX_GROUPS = 100_000
# The planner's simulator checks report headroom: how the chosen stack holds at a few times its
# stated peak (2x, 3x). Past 10x the question is a new plan for a new peak, not this plan's
# headroom, and each check simulates `multiple` times the traffic: 300x took two minutes and
# 1e6 hung. An hour of simulated arrivals per check is plenty for a steady-state p95 (the
# defaults are 360 s and 60 s) and bounds what a stray digit costs.
MAX_LOAD_MULTIPLE = 10.0
MAX_CHECK_DURATION_S = 3600.0


# Ceilings on what a price or a power figure may be, each far past any real one (an H100 rents
# for a few dollars an hour; a GB200 NVL72 rack draws about 130 kW and costs a few million
# dollars). A stray run of digits (`pue: 1e308`) overflowed the node's $/h to infinity and was
# a traceback from the stack file's model; `capex_usd_per_node: 1e308` was a plan priced with
# 300 digits. Past these the number is a typo, not a price.
MAX_USD_PER_GPU_HOUR = 10_000.0
MAX_USD_PER_NODE = 1e8
MAX_KW_PER_NODE = 1000.0
MAX_PUE = 5.0
MAX_USD_PER_KWH = 10.0
MAX_USD_PER_MILLION_TOKENS = 10_000.0
# The pools the planner adds for a workload: its long-context pool and its fallback pool.
POOL_SUFFIXES = ("-long", "-fallback")
# The burstiest arrivals a workload may state: a gamma shape of 0.01 (gaps' CV² of 100).
MIN_BURSTINESS = 0.01
# GPUs in one node. The largest in the catalog's sources is a GB200 NVL72 rack (72 GPUs under
# one NVLink domain). Spare GPUs on an owned node become extra replicas one by one, so
# `gpus_per_node: 1000000000` hung `inhouse plan` filling the node.
MAX_GPUS_PER_NODE = 72
# Capex spread over less than a month is not amortization (`1e-300` priced a node at 1e305 $/h).
MIN_AMORTIZATION_YEARS = 1.0 / 12.0


def _at_most(limit: float, what: str) -> AfterValidator:
    """A ceiling whose message says what the field holds and that the value is a typo."""

    def check(value: float | None) -> float | None:
        if value is not None and value > limit:
            raise ValueError(
                f"{value:g} is more than {limit:g} {what}, far past any real one; "
                "check the number for stray digits"
            )
        return value

    return AfterValidator(check)


def _share_not_percent(value: Any) -> Any:
    """A share written as a percentage (`availability: 99.9`, `prefix_reuse: 85`) gets the fix
    in its message instead of pydantic's bare "should be less than 1"."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 1 < value <= 100:
        raise ValueError(
            f"{value:g} reads as a percentage; write it as a share between 0 and 1 "
            f"({value / 100:g})"
        )
    return value


class TokenLengths(SpecModel):
    """A token-length distribution by its median and 95th percentile (a lognormal between)."""

    p50: int = Field(gt=0)
    p95: int = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> TokenLengths:
        if self.p95 < self.p50:
            raise ValueError(f"p95 ({self.p95}) must be at least p50 ({self.p50})")
        return self


class Traffic(SpecModel):
    """Average and peak load: a request rate (per second or per minute) for open-loop traffic,
    or concurrent sessions for multi-turn agents. The average holds during active hours."""

    avg_per_s: float | None = Field(default=None, gt=0)
    peak_per_s: float | None = Field(default=None, gt=0)
    avg_per_min: float | None = Field(default=None, gt=0)
    peak_per_min: float | None = Field(default=None, gt=0)
    avg_sessions: int | None = Field(default=None, gt=0, le=MAX_SESSIONS)
    peak_sessions: int | None = Field(default=None, gt=0, le=MAX_SESSIONS)

    @model_validator(mode="after")
    def _one_form(self) -> Traffic:
        forms = {
            "per_s": (self.avg_per_s, self.peak_per_s),
            "per_min": (self.avg_per_min, self.peak_per_min),
            "sessions": (self.avg_sessions, self.peak_sessions),
        }
        given = [name for name, pair in forms.items() if any(v is not None for v in pair)]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of avg_per_s/peak_per_s, avg_per_min/peak_per_min or "
                f"avg_sessions/peak_sessions (got {given or 'none'})"
            )
        avg, peak = forms[given[0]]
        if avg is None or peak is None:
            raise ValueError(f"give both the avg_ and the peak_ value of the {given[0]} form")
        if peak < avg:
            raise ValueError(f"peak ({peak}) must be at least avg ({avg})")
        return self

    @property
    def is_sessions(self) -> bool:
        return self.peak_sessions is not None

    def rate_per_s(self, which: Literal["avg", "peak"]) -> float:
        """Open-loop request rate; sessions have no fixed rate (see `traffic.py`)."""
        per_s = getattr(self, f"{which}_per_s")
        if per_s is not None:
            return float(per_s)
        per_min = getattr(self, f"{which}_per_min")
        assert per_min is not None, "rate_per_s() is for open-loop traffic"
        return float(per_min) / 60.0

    def sessions(self, which: Literal["avg", "peak"]) -> int:
        value = getattr(self, f"{which}_sessions")
        assert value is not None, "sessions() is for session traffic"
        return int(value)


class MultiTurn(SpecModel):
    """Shape of an agent session: turn 1 sends the app's system prompt and a first message; each
    later turn re-sends the history plus a tool output, after a think time."""

    num_apps: int = Field(default=4, gt=0, le=MAX_PREFIX_GROUPS)
    system_prompt_tokens: int = Field(default=6000, ge=0)
    min_turns: int = Field(default=3, gt=0)
    max_turns: int = Field(default=6, gt=0)
    first_message_tokens: TokenLengths = TokenLengths(p50=400, p95=1500)
    tool_output_tokens: TokenLengths = TokenLengths(p50=1000, p95=4000)
    think_time_s: float = Field(default=3.0, ge=0)

    @field_validator("think_time_s")
    @classmethod
    def _within_a_check(cls, seconds: float) -> float:
        # NOTE: `think_time_s: 1e300` planned: the forecast rate (sessions over turn time) was
        # nil, each session's later turns never came, and $/request read 1.7e296.
        if seconds > MAX_CHECK_DURATION_S:
            raise ValueError(
                f"{seconds:g} s between turns is more than the {MAX_CHECK_DURATION_S:g} s (an "
                "hour) the longest simulator check runs, so no session would take a second "
                "turn in it; a user reading an answer or a tool call takes seconds (3 by "
                "default): check the number, or state such sessions as open-loop traffic"
            )
        return seconds

    @model_validator(mode="after")
    def _turns(self) -> MultiTurn:
        if self.max_turns < self.min_turns:
            raise ValueError(f"max_turns ({self.max_turns}) is below min_turns ({self.min_turns})")
        return self


def default_alarm_ms(target_ms: float) -> float:
    """The p95 that pages where the SLO states none: 1.25x the target."""
    return round(1.25 * float(target_ms), 1)


class Slo(SpecModel):
    """p95 targets in ms (null: no target) and the p95 that should page (default: 1.25x the
    target), plus availability: the share of requests answered without an error."""

    ttft_p95_ms: float | None = Field(default=None, gt=0)
    ttft_alarm_ms: float | None = Field(default=None, gt=0)
    itl_p95_ms: float | None = Field(default=None, gt=0)
    itl_alarm_ms: float | None = Field(default=None, gt=0)
    tpot_p95_ms: float | None = Field(default=None, gt=0)
    tpot_alarm_ms: float | None = Field(default=None, gt=0)
    e2e_p95_ms: float | None = Field(default=None, gt=0)
    e2e_alarm_ms: float | None = Field(default=None, gt=0)
    # Reported, not sized for: p95 TTFT of requests that find none of their prompt in the
    # prefix cache (`inhouse report` measures it from the bench's per-request cached tokens).
    ttft_cold_p95_ms: float | None = Field(default=None, gt=0)
    ttft_cold_alarm_ms: float | None = Field(default=None, gt=0)
    availability: float = Field(default=0.999, gt=0, lt=1)
    # Long prompts on a pool of their own with a looser TTFT (the seeds' "dedicated pool with a
    # higher TTFT SLO": a 24K-token prompt cannot meet a chat TTFT). Null: one TTFT target for
    # every prompt. `long_prompt_tokens` is stated in `slo` only; `degraded_slo` may loosen
    # `long_ttft_p95_ms` (default: the normal one).
    long_prompt_tokens: int | None = Field(default=None, gt=0)
    long_ttft_p95_ms: float | None = Field(default=None, gt=0)

    _availability_share = field_validator("availability", mode="before")(_share_not_percent)

    @model_validator(mode="after")
    def _alarms(self) -> Slo:
        # Checked here, where the error names the file and field: the stack's SLO refused an
        # alarm below its target only when the plan was written (a pydantic traceback).
        for metric in (*METRICS, "ttft_cold"):
            target = getattr(self, f"{metric}_p95_ms")
            alarm = getattr(self, f"{metric}_alarm_ms")
            if alarm is None:
                continue
            if target is None:
                raise ValueError(
                    f"{metric}_alarm_ms ({alarm:g}) has no {metric}_p95_ms target to page on: "
                    f"state the target or remove the alarm"
                )
            if alarm < target:
                raise ValueError(
                    f"{metric}_alarm_ms ({alarm:g}) is below {metric}_p95_ms ({target:g}): the "
                    "alarm would page while the target still holds; set it at or above the target"
                )
        if self.long_ttft_p95_ms is not None:
            if self.ttft_p95_ms is None:
                raise ValueError(
                    f"long_ttft_p95_ms ({self.long_ttft_p95_ms:g}) loosens ttft_p95_ms for long "
                    "prompts, and there is no ttft_p95_ms: state the TTFT target for the others"
                )
            if self.long_ttft_p95_ms < self.ttft_p95_ms:
                raise ValueError(
                    f"long_ttft_p95_ms ({self.long_ttft_p95_ms:g}) is below ttft_p95_ms "
                    f"({self.ttft_p95_ms:g}): long prompts take longer to prefill, so their "
                    "target is the looser one; set it at or above ttft_p95_ms"
                )
        cold, warm = self.ttft_cold_p95_ms, self.ttft_p95_ms
        if cold is not None and warm is not None and cold < warm:
            # NOTE: a cold target under the normal one (the two swapped) was reported, never
            # met, without a word at planning.
            raise ValueError(
                f"ttft_cold_p95_ms ({cold:g}) is below ttft_p95_ms ({warm:g}): a request with "
                "nothing of its prompt cached prefills all of it, so its target is the looser "
                "one; set it at or above ttft_p95_ms"
            )
        return self

    @property
    def has_long_ttft(self) -> bool:
        return self.long_prompt_tokens is not None and self.long_ttft_p95_ms is not None

    def long_alarm_ms(self) -> float:
        assert self.long_ttft_p95_ms is not None, "no long-prompt TTFT target"
        return default_alarm_ms(self.long_ttft_p95_ms)

    def for_long_prompts(self, long_ttft_ms: float) -> Slo:
        """This SLO as the long-context pool is held to it: `long_ttft_ms` for TTFT (its alarm
        1.25x), every other target as it is."""
        return self.model_copy(
            update={"ttft_p95_ms": long_ttft_ms, "ttft_alarm_ms": default_alarm_ms(long_ttft_ms)}
        )

    def for_all_prompts(self) -> Slo:
        """The SLO a series of all the workload's prompts (the gateway's, a bench's) can be
        held to. With long prompts on their own looser TTFT, that is the long-prompt target:
        the mixture's p95 is at most the larger of its parts' p95s, and the short prompts'
        target would fail (and page) a stack that meets both."""
        if self.long_ttft_p95_ms is not None and self.has_long_ttft:
            return self.for_long_prompts(self.long_ttft_p95_ms)
        return self

    def targets(self) -> dict[str, float]:
        """`{metric: target_ms}` for every metric with a target, in a fixed order."""
        out: dict[str, float] = {}
        for metric in METRICS:
            target = getattr(self, f"{metric}_p95_ms")
            if target is not None:
                out[metric] = float(target)
        return out

    def alarm_ms(self, metric: str) -> float:
        alarm = getattr(self, f"{metric}_alarm_ms")
        target = getattr(self, f"{metric}_p95_ms")
        assert target is not None, f"{metric} has no target"
        return float(alarm) if alarm is not None else default_alarm_ms(target)


METRICS = ("ttft", "itl", "tpot", "e2e")


class ModelChoice(SpecModel):
    """Models a workload may run on, best first; `min_params_b` is the quality floor (models below
    it are refused); `fallback` a smaller model for degraded mode; `lora_on` names another
    workload whose model may serve this one as LoRA adapters instead of a model of its own."""

    allowed: tuple[str, ...] = Field(min_length=1)
    min_params_b: float | None = Field(default=None, gt=0)
    fallback: str | None = None
    lora_on: str | None = None


class WorkloadReq(SpecModel):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=30)
    kind: WorkloadKind
    traffic: Traffic
    prompt_tokens: TokenLengths | None = Field(
        default=None, description="per request; derived from `multi_turn` for agents"
    )
    output_tokens: TokenLengths
    max_prompt_tokens: int | None = Field(
        default=None, gt=0, description="longest prompt served (default 4x the p95)"
    )
    prefix_reuse: float = Field(
        default=0.0, ge=0, lt=1, description="expected prefix-cache hit rate (token share)"
    )
    _prefix_reuse_share = field_validator("prefix_reuse", mode="before")(_share_not_percent)
    shared_prefix_tokens: int = Field(default=0, ge=0)
    num_prefix_groups: int = Field(default=4, gt=0, le=MAX_PREFIX_GROUPS)
    multi_turn: MultiTurn | None = None
    burstiness: float = Field(
        default=1.0, gt=0, description="gamma shape of arrival gaps: 1 Poisson, <1 burstier"
    )

    @field_validator("burstiness")
    @classmethod
    def _not_all_at_once(cls, shape: float) -> float:
        # NOTE: a gamma shape near 0 sends the traffic in a few clumps far apart: 0.001 left a
        # 20-s check with no completed request ("raise verify_duration_s"), 1e-6 sent 10,000
        # requests in 4 ns ("lower load_multiples"), 1e-300 read a 300-digit TTFT; none named
        # this field.
        if shape < MIN_BURSTINESS:
            raise ValueError(
                f"{shape:g} sends the traffic in a few clumps far apart (gaps' CV² = "
                f"1/burstiness = {1 / shape:.3g}); use at least {MIN_BURSTINESS:g} (CV² 100), "
                "0.5 for bursty traffic, 1 for Poisson"
            )
        return shape

    slo: Slo
    degraded_slo: Slo | None = None
    models: ModelChoice
    tier: Literal["interactive", "standard", "batch"] = Field(
        default="standard",
        description="the gateway tier its tenants use (vLLM priority 0, 5, 10): the engine "
        "serves lower priorities first, and with a replica lost the lowest tier is shed first",
    )

    @model_validator(mode="before")
    @classmethod
    def _agent_defaults(cls, data: Any) -> Any:
        # An agent without `multi_turn` takes the documented defaults (it was an assert).
        if isinstance(data, dict) and data.get("kind") == "agent" and "multi_turn" not in data:
            return {**data, "multi_turn": {}}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadReq:
        if self.kind == "agent":
            if not self.traffic.is_sessions:
                raise ValueError("an agent workload states traffic as avg_/peak_sessions")
        else:
            if self.traffic.is_sessions:
                raise ValueError(f"a {self.kind} workload states traffic as a request rate")
            if self.prompt_tokens is None:
                raise ValueError(f"a {self.kind} workload needs prompt_tokens (p50, p95)")
            if self.multi_turn is not None:
                raise ValueError("multi_turn is for kind: agent")
            if self.shared_prefix_tokens >= self.prompt_tokens.p50:
                # The generator cut it to the p50 while the KV working set kept it whole.
                raise ValueError(
                    f"shared_prefix_tokens ({self.shared_prefix_tokens}) is not below "
                    f"prompt_tokens.p50 ({self.prompt_tokens.p50}): the shared prefix is part "
                    "of each prompt; lower it or raise the prompt lengths"
                )
            # NOTE: a limit below the p95 was raised to the p95 without a word (the generator
            # cannot cap a distribution below its own p95); say so instead.
            longest = self.max_prompt_tokens
            if longest is not None and longest < self.prompt_tokens.p95:
                raise ValueError(
                    f"max_prompt_tokens ({longest}) is below prompt_tokens.p95 "
                    f"({self.prompt_tokens.p95}): more than 5% of the prompts would be refused; "
                    "raise max_prompt_tokens to at least the p95, or lower the p95"
                )
        if not self.slo.targets():
            raise ValueError("slo needs at least one p95 target (ttft, itl, tpot or e2e)")
        self._long_prompts_stated()
        self._degraded_loosens()
        if self.output_tokens.p95 < 2:
            for slo in (self.slo, self.degraded_slo):
                gaps = [m for m in ("itl", "tpot") if slo is not None and m in slo.targets()]
                if gaps:
                    # One-token answers have no inter-token gap: the check measured nothing
                    # and the plan was "infeasible" without a reason.
                    raise ValueError(
                        f"{gaps[0]}_p95_ms needs answers of two tokens or more, and "
                        "output_tokens.p95 is 1: drop the target or state the output lengths"
                    )
        return self

    def _degraded_loosens(self) -> None:
        """The SLO with a replica lost may only loosen the normal one.

        NOTE: a degraded target below the normal one (the two swapped, `ttft_p95_ms: 500` under
        a normal 1000) planned without a word, sizing the pools for the stricter target with a
        replica lost while the memo called it the relaxed one."""
        if self.degraded_slo is None:
            return
        for field in (*(f"{m}_p95_ms" for m in ("ttft", "itl", "tpot", "e2e")), "long_ttft_p95_ms"):
            normal, degraded = getattr(self.slo, field), getattr(self.degraded_slo, field)
            if normal is not None and degraded is not None and degraded < normal:
                raise ValueError(
                    f"degraded_slo.{field} ({degraded:g}) is below slo.{field} ({normal:g}): "
                    "the targets with a replica lost may only loosen the normal ones; raise it "
                    f"to at least {normal:g}, or drop it to hold a lost replica to the normal "
                    "target"
                )

    def _long_prompts_stated(self) -> None:
        """`slo.long_prompt_tokens` and `slo.long_ttft_p95_ms` come together, on a workload the
        planner can split by prompt length, at a length some prompts exceed."""
        slo, degraded = self.slo, self.degraded_slo
        if degraded is not None and degraded.long_prompt_tokens is not None:
            raise ValueError(
                "degraded_slo.long_prompt_tokens: the long prompts are defined once, in slo; "
                "degraded_slo may state only long_ttft_p95_ms"
            )
        if degraded is not None and degraded.long_ttft_p95_ms is not None and not slo.has_long_ttft:
            raise ValueError(
                "degraded_slo.long_ttft_p95_ms needs slo.long_prompt_tokens and "
                "slo.long_ttft_p95_ms: state which prompts are long, and their normal target"
            )
        if (slo.long_prompt_tokens is None) != (slo.long_ttft_p95_ms is None):
            given, missing = (
                ("long_prompt_tokens", "long_ttft_p95_ms")
                if slo.long_ttft_p95_ms is None
                else ("long_ttft_p95_ms", "long_prompt_tokens")
            )
            raise ValueError(
                f"slo.{given} needs slo.{missing}: long prompts (longer than "
                "long_prompt_tokens) get their own p95 TTFT (long_ttft_p95_ms); state both"
            )
        if slo.long_prompt_tokens is None:
            return
        if self.kind in ("agent", "utility") or self.prompt_tokens is None:
            raise ValueError(
                f"slo.long_prompt_tokens is for longctx and shared-prefix workloads (their "
                f"prompts are split between a standard and a long-context pool); a {self.kind} "
                "workload is served by one pool: drop slo.long_prompt_tokens and "
                "slo.long_ttft_p95_ms"
            )
        longest = self.max_prompt_tokens
        if slo.long_prompt_tokens < self.prompt_tokens.p50:
            raise ValueError(
                f"slo.long_prompt_tokens ({slo.long_prompt_tokens}) is below prompt_tokens.p50 "
                f"({self.prompt_tokens.p50}): more than half the prompts would be 'long'; raise "
                "it to where the long tail starts (the p75 or p90 prompt, say)"
            )
        if longest is not None and slo.long_prompt_tokens >= longest:
            raise ValueError(
                f"slo.long_prompt_tokens ({slo.long_prompt_tokens}) is not below "
                f"max_prompt_tokens ({longest}): no prompt would be long; lower it"
            )

    def judged_slo(self, *, degraded: bool = False) -> Slo:
        """The SLO a simulator check holds the workload to: with one replica lost its
        `degraded_slo` (if any), long prompts defined by `slo` and held to the degraded
        long-prompt target or else the normal one."""
        if not degraded or self.degraded_slo is None:
            return self.slo
        if not self.slo.has_long_ttft:
            return self.degraded_slo
        return self.degraded_slo.model_copy(
            update={
                "long_prompt_tokens": self.slo.long_prompt_tokens,
                "long_ttft_p95_ms": self.degraded_slo.long_ttft_p95_ms or self.slo.long_ttft_p95_ms,
            }
        )


class HardwareOffer(SpecModel):
    """A GPU type on offer: owned or bought (capex) or rented (per GPU-hour)."""

    gpu: str
    gpus_per_node: int = Field(default=8, gt=0)
    max_nodes: int | None = Field(default=None, gt=0, description="null: as many as needed")
    pricing: Literal["capex", "hourly"]
    capex_usd_per_node: Annotated[
        float | None, Field(gt=0), _at_most(MAX_USD_PER_NODE, "dollars for one node")
    ] = None
    amortization_years: float = Field(default=3.0, gt=0)
    power_kw_per_node: Annotated[
        float | None,
        Field(gt=0, description="peak draw (default: 1.8x the GPUs' TDP)"),
        _at_most(MAX_KW_PER_NODE, "kW for one node"),
    ] = None
    avg_power_fraction: float = Field(default=0.7, gt=0, le=1)
    _power_share = field_validator("avg_power_fraction", mode="before")(_share_not_percent)
    pue: Annotated[float, Field(ge=1), _at_most(MAX_PUE, "for a PUE")] = 1.3
    usd_per_kwh: Annotated[float, Field(ge=0), _at_most(MAX_USD_PER_KWH, "dollars a kWh")] = 0.12
    ops_usd_per_node_year: Annotated[
        float, Field(ge=0), _at_most(MAX_USD_PER_NODE, "dollars a node-year")
    ] = 0.0
    usd_per_gpu_hour: Annotated[
        float | None, Field(gt=0), _at_most(MAX_USD_PER_GPU_HOUR, "dollars a GPU-hour")
    ] = None

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, name: str) -> str:
        try:
            get_gpu(name)
        except SpecError as exc:
            raise ValueError(str(exc)) from None
        return name

    @field_validator("gpus_per_node")
    @classmethod
    def _a_real_node(cls, gpus: int) -> int:
        if gpus > MAX_GPUS_PER_NODE:
            raise ValueError(
                f"{gpus:,} GPUs in one node is more than the {MAX_GPUS_PER_NODE} of the largest "
                "(a GB200 NVL72 rack); state the GPUs one server holds (8 in an HGX or DGX "
                "node) and the servers in max_nodes"
            )
        return gpus

    @field_validator("amortization_years")
    @classmethod
    def _a_month_at_least(cls, years: float) -> float:
        if years < MIN_AMORTIZATION_YEARS:
            raise ValueError(
                f"{years:g} years is less than a month; capex is spread over years (3 by "
                "default): write the years, or price the hardware `hourly`"
            )
        return years

    @model_validator(mode="after")
    def _priced(self) -> HardwareOffer:
        if self.pricing == "capex" and self.capex_usd_per_node is None:
            raise ValueError("pricing: capex needs capex_usd_per_node")
        if self.pricing == "hourly" and self.usd_per_gpu_hour is None:
            raise ValueError("pricing: hourly needs usd_per_gpu_hour")
        return self


_per_million = _at_most(MAX_USD_PER_MILLION_TOKENS, "dollars a million tokens")


class ApiPrice(SpecModel):
    name: str

    @field_validator("name")
    @classmethod
    def _one_table_cell(cls, name: str) -> str:
        # NOTE: the name is a cell of the memo's API table: a `|` or a line break split the row
        # (`a|b\nc` wrote a row of its own), and an empty name left a blank cell.
        bad = sorted({repr(c) for c in name if c == "|" or not c.isprintable()})
        if not name.strip() or bad:
            found = f" (has {', '.join(bad)})" if bad else ""
            raise ValueError(
                f"{name!r}{found} is not a one-line name; name the API on one line of printable "
                "characters, without `|` (e.g. gpt-4.1-class)"
            )
        return name

    input_usd_per_million: Annotated[float, Field(ge=0), _per_million]
    output_usd_per_million: Annotated[float, Field(ge=0), _per_million]
    cached_input_usd_per_million: Annotated[float | None, Field(ge=0), _per_million] = None


class Usage(SpecModel):
    """When traffic runs: the average rates hold for these hours, the rest is idle."""

    active_hours_per_day: float = Field(default=24.0, gt=0, le=24)
    active_days_per_month: float = Field(default=30.4, gt=0, le=31)

    @model_validator(mode="after")
    def _within_a_month(self) -> Usage:
        # NOTE: the stack is paid for 730 h a month (8,760 / 12); 24 h x 31 d counted 744 h of
        # API spend against it, and "rented only in active hours" cost more than 24/7.
        if self.active_hours_per_month > HOURS_PER_MONTH + 1e-9:
            raise ValueError(
                f"active_hours_per_day x active_days_per_month is "
                f"{self.active_hours_per_month:g} h, more than the {HOURS_PER_MONTH:g} h of an "
                "average month (8,760 h / 12) that the cost sheet counts; for traffic every "
                "hour use 24 and 30.4 (the defaults)"
            )
        return self

    @property
    def active_hours_per_month(self) -> float:
        return self.active_hours_per_day * self.active_days_per_month


def _headroom(multiple: float) -> float:
    if multiple > MAX_LOAD_MULTIPLE:
        raise ValueError(
            f"{multiple:g}x peak is past the {MAX_LOAD_MULTIPLE:g}x a headroom check reports on "
            "(each check simulates that many times the traffic): use at most "
            f"{MAX_LOAD_MULTIPLE:g}, or, for a larger peak, state it in the workload's traffic "
            "and plan again"
        )
    return multiple


class Planning(SpecModel):
    """The planner's own knobs."""

    headroom: float = Field(
        default=0.1, ge=0, lt=1, description="analytic p95 must sit this far below each target"
    )
    max_utilization: float = Field(default=0.7, gt=0, lt=1)
    enforce_degraded_slo: bool = Field(
        default=True,
        description="size pools so the degraded SLO holds with one replica lost, checked in the "
        "simulator (false: only report it, and price the plan that would meet it)",
    )
    # NOTE: each list needs an item and each item a sensible value: an empty list left nothing
    # to try and was reported as "no GPU on offer fits the model", TP 0 and a budget of 0
    # were tracebacks.
    quantizations: tuple[str, ...] = Field(default=("fp8", "bf16"), min_length=1)
    kv_cache_dtypes: tuple[str, ...] = Field(default=("auto", "fp8"), min_length=1)
    tensor_parallel: tuple[Annotated[int, Field(gt=0)], ...] = Field(
        default=(1, 2, 4, 8), min_length=1
    )
    max_num_batched_tokens: tuple[Annotated[int, Field(gt=0)], ...] = Field(
        default=(512, 1024, 2048, 8192), min_length=1
    )
    backend: Literal["vllm", "sglang"] = "vllm"
    routing_policy: str = "cache_aware"
    verify_top: int = Field(
        default=3, ge=0, description="simulator rounds at 1x peak before giving up (0: none)"
    )
    verify_duration_s: float = Field(
        # NOTE: 90 s (14 five-second blocks after the warm-up) let the seed decide the code
        # assistant's 1x TTFT: 954-1,282 ms over five seeds against 1,200 ms, and rejected a
        # stack $12/h cheaper on noise. 360 s (66 blocks) read 1,018-1,107 ms for that stack,
        # for 2-4 s more CPU per plan of the examples (docs/plan.md, step 6).
        default=360.0,
        gt=0,
        description="simulated seconds of arrivals per check at 1x peak",
    )
    stress_duration_s: float = Field(
        default=60.0, gt=0, description="simulated seconds per 2x/3x and one-replica-lost check"
    )
    load_multiples: tuple[Annotated[float, Field(gt=0), AfterValidator(_headroom)], ...] = (
        1.0,
        2.0,
        3.0,
    )
    seed: int = 0
    # Availability arithmetic (`plan/availability.py`): assumptions, not measurements, until the
    # operator states the fleet's own. An engine crash, a GPU fault or an engine update takes a
    # replica down; a host reboot (driver, kernel, firmware) or a power supply, NVSwitch or board
    # fault takes its node and every replica on it (docs/plan.md, Availability).
    replica_failures_per_month: float = Field(
        default=1.0, ge=0, le=730, description="times a month one replica goes down (assumed)"
    )
    node_failures_per_month: float = Field(
        default=0.5,
        ge=0,
        le=730,
        description="times a month one node goes down with its replicas (assumed)",
    )
    replica_mttr_min: float = Field(
        default=60.0,
        gt=0,
        le=43800,
        description="minutes to bring a lost replica or node back (assumed)",
    )

    @field_validator("verify_duration_s", "stress_duration_s")
    @classmethod
    def _an_hour_at_most(cls, seconds: float) -> float:
        if seconds > MAX_CHECK_DURATION_S:
            raise ValueError(
                f"{seconds:g} s is more than the {MAX_CHECK_DURATION_S:g} s (an hour) of "
                "simulated arrivals a check may run; a steady-state p95 settles in minutes: "
                f"use at most {MAX_CHECK_DURATION_S:g} (the defaults: 360 s at 1x, 60 s for the "
                "others)"
            )
        return seconds

    @field_validator("routing_policy")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        # NOTE: an unknown name was read only when the simulator built the router: after the
        # search, as "routing policy 'x' is unknown" without the field, and under --no-verify
        # never, so the plan wrote a stack.yaml that `inhouse simulate` and `up` then refuse.
        if name not in policy_names():
            raise ValueError(
                f"{name!r} is not a routing policy; use one of: {', '.join(policy_names())} "
                "(docs/routing.md)"
            )
        return name

    @field_validator("quantizations")
    @classmethod
    def _known_quants(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            try:
                normalize_quant(name)
            except SpecError as exc:
                raise ValueError(str(exc)) from None
        return names

    @field_validator("kv_cache_dtypes")
    @classmethod
    def _known_kv_dtypes(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            try:
                kv_dtype_bytes(name)
            except SpecError as exc:
                raise ValueError(str(exc)) from None
        return names


class Requirements(SpecModel):
    version: Literal[1] = 1
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    description: str = ""
    workloads: tuple[WorkloadReq, ...] = Field(min_length=1)
    hardware: tuple[HardwareOffer, ...] = Field(min_length=1)
    api_prices: tuple[ApiPrice, ...] = ()
    usage: Usage = Usage()
    planning: Planning = Planning()

    @field_validator("hardware")
    @classmethod
    def _one_offer_per_gpu(cls, offers: tuple[HardwareOffer, ...]) -> tuple[HardwareOffer, ...]:
        # NOTE: the planner keys offers by GPU type; a second offer of one type replaced the
        # first without a word (its price, its max_nodes).
        gpus = [get_gpu(offer.gpu).name for offer in offers]
        twice = sorted({gpu for gpu in gpus if gpus.count(gpu) > 1})
        if twice:
            raise ValueError(
                f"{', '.join(twice)} is offered more than once; give one offer per GPU type "
                "(one price, one max_nodes)"
            )
        return offers

    @field_validator("api_prices")
    @classmethod
    def _one_price_per_name(cls, apis: tuple[ApiPrice, ...]) -> tuple[ApiPrice, ...]:
        names = [api.name for api in apis]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(
                f"{', '.join(twice)} is named more than once (the last price replaced the "
                "others); give each API price its own name"
            )
        return apis

    @model_validator(mode="after")
    def _references(self) -> Requirements:
        names = [w.name for w in self.workloads]
        if len(set(names)) != len(names):
            raise ValueError(f"workload names must be unique, got {names}")
        # NOTE: the planner names a split workload's long pool `<name>-long` and a fallback pool
        # `<name>-fallback`; a workload named so (`a` and `a-fallback`) planned, then was a
        # traceback from the stack's model ("pool names must be unique").
        for name in names:
            for suffix in POOL_SUFFIXES:
                stem = name.removesuffix(suffix)
                if stem != name and stem in names:
                    raise ValueError(
                        f"workload {name!r} is the name the planner gives the {suffix[1:]} pool "
                        f"of workload {stem!r} (<workload>{suffix}); rename it"
                    )
        for workload in self.workloads:
            target = workload.models.lora_on
            # NOTE: served as adapters on another pool, a workload has no pool of its own for a
            # fallback to cover: the plan that chose that layout dropped the fallback pool
            # without a word (docs/plan.md: never a plan without its fallback pool).
            if target is not None and workload.models.fallback is not None:
                raise ValueError(
                    f"workload {workload.name!r}: models.fallback and models.lora_on together; "
                    f"as adapters on {target!r}'s pool it has no pool of its own to fall back "
                    f"from: drop lora_on to give it a pool and a fallback, or drop fallback (a "
                    f"fallback on {target!r} covers both)"
                )
            if target is not None and (target not in names or target == workload.name):
                raise ValueError(
                    f"workload {workload.name!r}: lora_on {target!r} must name another "
                    f"workload; workloads: {names}"
                )
            # NOTE: adapters ride on a base model's pool, one hop: a chain (a on b, b on c) or a
            # cycle (a on b, b on a) planned and then was a traceback from the stack's model
            # (a workload served by no pool, or no pool at all).
            if target is not None and self.workload(target).models.lora_on is not None:
                raise ValueError(
                    f"workload {workload.name!r}: lora_on {target!r}, which is itself lora_on "
                    f"{self.workload(target).models.lora_on!r}; adapters ride on a workload "
                    "served by its own pool: point lora_on at that workload, or drop one"
                )
        return self

    def workload(self, name: str) -> WorkloadReq:
        for workload in self.workloads:
            if workload.name == name:
                return workload
        raise KeyError(name)


def parse_requirements(data: Any, source: str = "requirements") -> Requirements:
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: a requirements file is a YAML mapping with `version`, `name`, "
            "`workloads`, `hardware`"
        )
    version = data.get("version", REQUIREMENTS_VERSION)
    if isinstance(version, str) and version.strip() == str(REQUIREMENTS_VERSION):
        # NOTE: `version: "1"` read "'1' is not supported; this inhouse reads version 1".
        raise SpecError(
            f"{source}: version: {version!r} is a string; write the number, unquoted: "
            f"`version: {REQUIREMENTS_VERSION}`"
        )
    if version != REQUIREMENTS_VERSION:
        raise SpecError(
            f"{source}: version: {version!r} is not supported; this inhouse reads version "
            f"{REQUIREMENTS_VERSION}"
        )
    try:
        return Requirements.model_validate(data)
    except ValidationError as exc:
        raise SpecError(describe_validation_error(exc, source, "docs/plan.md")) from exc

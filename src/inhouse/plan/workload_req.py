"""A workload as the requirements file states it: its traffic, token lengths, multi-turn shape,
SLOs and the models it may run on.

`requirements.py` holds the file around the workloads (the hardware on offer, API prices, usage
hours, the planner's knobs) and re-exports every name here. docs/plan.md documents every field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from inhouse.spec.base import SpecModel

WorkloadKind = Literal["agent", "utility", "longctx", "shared-prefix"]
# Served by one pool whatever their prompts: the planner never splits them by length.
UNSPLIT_KINDS: tuple[WorkloadKind, ...] = ("agent", "utility")
# Counts the generators build one by one before the first request (sessions, apps' system
# prompts, prefix groups): a stray digit (1e9) hung `inhouse plan` while it characterized the
# workload. A pool holds at most 64 replicas, so a count past these is no plan anyway.
MAX_SESSIONS = 100_000
MAX_PREFIX_GROUPS = 100_000
# An hour of simulated arrivals per check is plenty for a steady-state p95 (the defaults are
# 360 s and 60 s) and bounds what a stray digit costs; a think time past it is no session.
MAX_CHECK_DURATION_S = 3600.0
# The burstiest arrivals a workload may state: a gamma shape of 0.01 (gaps' CV² of 100).
MIN_BURSTINESS = 0.01
# The highest request rate a workload may state: a million a second (86 billion a day). The
# planner sizes at most 64 replicas a pool, and 64 B300 replicas of the smallest model answering
# 8-token prompts with one token plan at about this rate; a figure past it is a stray digit or
# a per-day count (1e12 read "prefill alone needs 97440273% of the replica").
MAX_RATE_PER_S = 1_000_000.0


def share_not_percent(value: Any) -> Any:
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

    @field_validator("avg_per_s", "peak_per_s", "avg_per_min", "peak_per_min")
    @classmethod
    def _plannable_rate(cls, value: float | None, info: ValidationInfo) -> float | None:
        per_min = str(info.field_name).endswith("_per_min")
        limit = MAX_RATE_PER_S * (60.0 if per_min else 1.0)
        if value is not None and value > limit:
            unit = "minute" if per_min else "second"
            raise ValueError(
                f"{value:g} requests a {unit} is more than the {limit:,.0f} a plan sizes (a "
                "million a second, 86 billion a day: 64 replicas of the smallest model serve "
                "about that at best); check the digits and the unit (avg_/peak_per_min for a "
                "rate per minute)"
            )
        return value

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

    _availability_share = field_validator("availability", mode="before")(share_not_percent)

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
    _prefix_reuse_share = field_validator("prefix_reuse", mode="before")(share_not_percent)
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
        if self.kind in UNSPLIT_KINDS or self.prompt_tokens is None:
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

"""Re-plan triggers: the sizing memo's "what would invalidate the plan", as data.

`inhouse plan` finds, for each changed assumption (longer prompts, fewer prefix hits, more
traffic, ...), the size at which the first SLO breaks, and sets a trigger halfway there on a
series an operator can watch. One `Trigger` is the one source of that level: the memo words it
with `describe`, the stack file carries it, and `inhouse render` makes it the ticket alert it
describes (`inhouse.render.alerts_triggers`), so the memo and the rules cannot disagree.

Each signal reads series that exist in production:

* `prompt_tokens_p95`: p95 of vLLM's `vllm:request_prompt_tokens` histogram of the pool, over
  `window` (tokens), as `histogram_quantile` interpolates it between vLLM's buckets;
* `output_tokens_p95`: p95 of vLLM's `vllm:request_generation_tokens` histogram of the pool,
  over `window` (tokens), read the same way (vLLM uses the same 1-2-5 buckets up to
  `max_model_len`);
* `prefix_hit_rate`: `vllm:prefix_cache_hits_total` over `vllm:prefix_cache_queries_total` of the
  pool, over `window` (a fraction);
* `request_rate`: the gateway's `inhouse_gateway_requests_total` for the workload's model name,
  over `window` (requests per second);
* `queue_every_replica`: `vllm:num_requests_waiting` above `threshold` on every replica of the
  pool at once (requests);
* `tpot_median`: median of vLLM's `vllm:request_time_per_output_token_seconds` of the pool over
  `window` (milliseconds), interpolated likewise.

The planned values and the levels of the three quantile signals are computed the way the rule
reads them (`inhouse.spec.vllm_buckets.histogram_quantile` over vLLM's buckets), so a level is
crossed when the watched series crosses it, not when the sample quantile would.

vLLM labels its series by served model only, so the engine signals are per pool; `workloads`
names what the pool's series carry. The gateway labels by the model name clients send, so
`request_rate` is per workload.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inhouse.spec.base import SpecModel

TriggerSignal = Literal[
    "prompt_tokens_p95",
    "output_tokens_p95",
    "prefix_hit_rate",
    "request_rate",
    "queue_every_replica",
    "tpot_median",
]
# Signals read from vLLM's token-count histograms: signal -> (histogram, what it counts).
TOKEN_HISTOGRAMS: dict[str, tuple[str, str]] = {
    "prompt_tokens_p95": ("vllm:request_prompt_tokens", "prompt"),
    "output_tokens_p95": ("vllm:request_generation_tokens", "output"),
}
# Signals that break the plan by falling (the rest break it by rising).
FALLING: frozenset[str] = frozenset({"prefix_hit_rate"})
DURATION_PATTERN = r"^[0-9]+[smhd]$"


class Trigger(SpecModel):
    """One re-plan trigger: `signal` of `pool` (or of the workload `model`, for gateway signals)
    crossing `threshold` for `hold` says the plan's assumption `change` no longer holds.
    `planned` is the signal at peak as the plan's simulation shows it (the analytic forecast
    for a plan run without verification); `breaks_at` the size of the change at which the
    first SLO breaks (None: it holds at the full change)."""

    change: str = Field(description="the sensitivity row, e.g. prefix_hit_halved")
    change_text: str = Field(description="the row's words, e.g. 'prefix-cache hit rate halved'")
    signal: TriggerSignal
    pool: str
    model: str = Field(description="the model name the series are selected by")
    workloads: tuple[str, ...] = Field(description="the workloads these series carry")
    threshold: float
    planned: float
    window: str = Field(default="15m", pattern=DURATION_PATTERN)
    hold: str = Field(default="15m", pattern=DURATION_PATTERN)
    breaks_at: float | None = None

    @property
    def falls(self) -> bool:
        return self.signal in FALLING


def duration_text(duration: str) -> str:
    """`15m` -> `15 min`, `1h` -> `1 h`, `1d` -> `1 d`."""
    unit = {"s": "s", "m": "min", "h": "h", "d": "d"}[duration[-1]]
    return f"{duration[:-1]} {unit}"


def value_text(trigger: Trigger, value: float) -> str:
    """A value of the trigger's signal in its unit, as the memo and the alert print it."""
    if trigger.signal in TOKEN_HISTOGRAMS:
        return f"{value:,.0f} tokens"
    if trigger.signal == "prefix_hit_rate":
        return f"{value:.0%}"
    if trigger.signal == "request_rate":
        return f"{value:,.2f}/s"
    if trigger.signal == "tpot_median":
        return f"{value:.1f} ms"
    return f"{value:g}"


def describe(trigger: Trigger) -> str:
    """The trigger in words, for the memo and the alert's description."""
    pool, hold = trigger.pool, duration_text(trigger.hold)
    carries = ", ".join(trigger.workloads)
    level, planned = value_text(trigger, trigger.threshold), value_text(trigger, trigger.planned)
    window = duration_text(trigger.window)
    if trigger.signal in TOKEN_HISTOGRAMS:
        histogram = TOKEN_HISTOGRAMS[trigger.signal][0]
        return (
            f"p95 of {histogram} on pool {pool} ({carries}) above {level} "
            f"(planned {planned}) over {window}, for {hold}"
        )
    if trigger.signal == "prefix_hit_rate":
        return (
            f"prefix-cache hit rate (vllm:prefix_cache_hits / vllm:prefix_cache_queries) on pool "
            f"{pool} ({carries}) below {level} (planned {planned}) over {window}, for {hold}"
        )
    if trigger.signal == "request_rate":
        return (
            f"{carries} request rate at the gateway (model {trigger.model}) above {level} "
            f"(planned peak {planned}) over {window}, for {hold}"
        )
    if trigger.signal == "queue_every_replica":
        return (
            f"requests waiting on every replica of pool {pool} at once "
            f"(vllm:num_requests_waiting > {trigger.threshold:g}) for {hold}"
        )
    return (
        f"median vllm:request_time_per_output_token_seconds on pool {pool} ({carries}) above "
        f"{level} (planned {planned} at peak) over {window}, for {hold}"
    )

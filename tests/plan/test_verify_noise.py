"""The 1x verification's p95s with their intervals: plan.json gives each judged metric its
interval and says when the pass is within the simulator's noise (`marginal`: the interval
reaches past the target), and the memo says so in the SLO row and in section 7. The code
assistant's TTFT passed at 1,139 ms against 1,200 ms on one 90-s seed; other seeds read up to
1,173 ms, and nothing in plan.json or the memo said how close it was."""

from __future__ import annotations

from typing import Any

import numpy as np

from inhouse.plan.memo import _slo_table
from inhouse.plan.memo_notes import _not_re_forecast
from inhouse.plan.p95_interval import BLOCK_S, p95_intervals
from inhouse.plan.report_degraded import check_rows
from inhouse.plan.requirements import Planning
from inhouse.plan.verify import METRIC_KEYS, SimCheck, warmup_for

NOISE = "passed by less than the simulator's noise"


def run_ttfts(seed: int = 1, num_blocks: int = 14) -> list[dict[str, np.ndarray]]:
    """A run's TTFTs in 5-s blocks: lognormal per request, a busy-or-not factor per block."""
    rng = np.random.default_rng(seed)
    return [
        {"p95_ttft_ms": 1000.0 * rng.uniform(0.8, 1.25) * rng.lognormal(0.0, 0.35, 60)}
        for _ in range(num_blocks)
    ]


def check(target_ms: float, run: list[dict[str, np.ndarray]]) -> SimCheck:
    """A 1x check of one workload judged on TTFT, with the run's p95 and its interval."""
    p95 = float(np.percentile(np.concatenate([b["p95_ttft_ms"] for b in run]), 95))
    interval = p95_intervals(run)["p95_ttft_ms"]
    assert interval is not None
    summary: dict[str, Any] = {
        **{key: float("nan") for key in METRIC_KEYS.values()},
        "p95_ttft_ms": p95,
        "p95_interval_ms": {"p95_ttft_ms": list(interval)},
        "completed": sum(len(b["p95_ttft_ms"]) for b in run),
        "failed": 0,
        "prefix_cache_hit_rate": 0.0,
        "checks": {"ttft": {"target_ms": target_ms, "p95_ms": p95, "pass": p95 <= target_ms}},
        "pass": p95 <= target_ms,
    }
    return SimCheck(1.0, {}, 90.0, {"code": summary})


def p95_and_interval(run: list[dict[str, np.ndarray]]) -> tuple[float, tuple[float, float]]:
    summary = check(1.0, run).workloads["code"]
    low, high = summary["p95_interval_ms"]["p95_ttft_ms"]
    return summary["p95_ttft_ms"], (low, high)


def report(sim: SimCheck) -> dict[str, Any]:
    rows = check_rows(sim, None, verification=True)
    target = sim.workloads["code"]["checks"]["ttft"]["target_ms"]
    return {
        "slo_check": {
            "1x": {"simulated_s": sim.duration_s, "workloads": rows},
            "targets": {"code": {"ttft": {"target_ms": target, "alarm_ms": 1.25 * target}}},
        },
        "requirements": {"workloads": [{"name": "code", "models": {}}]},
    }


def test_a_pass_whose_interval_reaches_past_the_target_is_marginal_in_plan_json() -> None:
    run = run_ttfts()
    p95, (low, high) = p95_and_interval(run)
    target = (p95 + high) / 2  # passed, but the interval's top is past the target
    assert p95 <= target < high
    item = check_rows(check(target, run), None, verification=True)["code"]["metrics"]["ttft"]
    assert item["pass"] is True
    assert item["p95_interval_ms"] == [low, high]  # next to the figure it bounds
    assert item["marginal"] is True


def test_a_pass_clear_of_the_noise_is_not_marginal() -> None:
    run = run_ttfts()
    p95, (low, high) = p95_and_interval(run)
    item = check_rows(check(1.5 * high, run), None, verification=True)["code"]["metrics"]["ttft"]
    assert item["p95_interval_ms"] == [low, high]
    assert item["marginal"] is False
    # A miss is a miss, not a marginal pass.
    missed = check_rows(check(0.9 * p95, run), None, verification=True)["code"]["metrics"]["ttft"]
    assert missed["pass"] is False and missed["marginal"] is False


def test_the_memo_says_a_marginal_pass_in_its_row_and_in_section_7() -> None:
    run = run_ttfts()
    p95, (low, high) = p95_and_interval(run)
    target = (p95 + high) / 2
    r = report(check(target, run))
    (row,) = [line for line in _slo_table(r, {}) if line.startswith("| code | p95 TTFT")]
    assert f"{p95:,.0f} ms ({low:,.0f}–{high:,.0f} ms) ok" in row
    assert NOISE in row
    (rests_on,) = [line for line in _not_re_forecast(r) if line]
    assert (
        f"the 1x check {NOISE}: code p95 TTFT {p95:,.0f} ms, interval {low:,.0f}–{high:,.0f} ms, "
        f"target {target:,.0f} ms"
    ) in rests_on
    assert "a longer `verify_duration_s` or more seeds would settle it" in rests_on


def test_the_memo_shows_the_interval_without_the_warning_when_the_pass_is_clear() -> None:
    run = run_ttfts()
    p95, (low, high) = p95_and_interval(run)
    r = report(check(1.5 * high, run))
    (row,) = [line for line in _slo_table(r, {}) if line.startswith("| code | p95 TTFT")]
    assert f"{p95:,.0f} ms ({low:,.0f}–{high:,.0f} ms) ok" in row
    assert NOISE not in row
    assert NOISE not in "\n".join(_not_re_forecast(r))


def test_the_default_1x_check_rests_on_enough_blocks_to_settle_a_near_pass() -> None:
    # One 90-s run (14 five-second blocks after its 18-s warm-up) let the seed decide the code
    # assistant's TTFT: 954-1,282 ms over seeds 0-4 against a 1,200 ms target, one a miss; a
    # 360-s run (66 blocks) read 1,018-1,107 ms for the same stack, for 2-4 s more CPU a plan.
    planning = Planning()
    warmup_s = warmup_for(planning.verify_duration_s)  # the rule the check applies
    assert (planning.verify_duration_s - warmup_s) // BLOCK_S >= 60
    # The interval narrows with the blocks: the synthetic run's, 14 blocks against 66.
    short = p95_intervals(run_ttfts(num_blocks=14))["p95_ttft_ms"]
    long = p95_intervals(run_ttfts(num_blocks=66))["p95_ttft_ms"]
    assert short is not None and long is not None
    assert long[1] - long[0] < 0.6 * (short[1] - short[0])

"""The memo states the length distribution the planner assumes, and a split layout says what
share of the traffic and of the prompt tokens each pool takes."""

import math
import re
from typing import Any

import numpy as np
import pytest

from inhouse.plan import build_report, make_plan
from inhouse.plan.layout import build_layouts
from inhouse.plan.memo import _workloads, render_memo
from inhouse.plan.traffic import profile_workload

from .plan_helpers import parse, small_requirements

Z95 = 1.6448536269514722  # the standard normal's 95th percentile
Z99 = 2.3263478740408408


def _code(max_prompt_tokens: int | None = 96_000) -> dict[str, Any]:
    workload: dict[str, Any] = {
        "name": "code",
        "kind": "longctx",
        "traffic": {"avg_per_s": 3, "peak_per_s": 12},
        "prompt_tokens": {"p50": 6000, "p95": 24000},
        "output_tokens": {"p50": 250, "p95": 900},
        "slo": {"ttft_p95_ms": 1200, "tpot_p95_ms": 50},
        "models": {"allowed": ["Llama-3.3-70B"]},
    }
    if max_prompt_tokens is not None:
        workload["max_prompt_tokens"] = max_prompt_tokens
    return {
        "version": 1,
        "name": "code-assistant",
        "workloads": [workload],
        "hardware": [{"gpu": "h100_sxm", "pricing": "hourly", "usd_per_gpu_hour": 3.0}],
    }


def test_a_split_layout_names_its_share_of_requests_and_of_prompt_tokens() -> None:
    # "code prompts above 11,264 tokens on a long-context pool" left the reader to work out
    # that about a quarter of the requests carry over half of the prompt tokens there.
    req = parse(_code())
    profile = profile_workload(req.workloads[0])
    prompt = profile.shapes.prompt
    splits = [
        layout.description
        for layout in build_layouts(req, {"code": profile})
        if "above" in layout.description
    ]
    assert len(splits) == 2
    for description in splits:
        match = re.search(
            r"above ([\d,]+) tokens \((\d+)% of requests, (\d+)% of prompt tokens\)", description
        )
        assert match, description
        threshold = int(match.group(1).replace(",", ""))
        long = prompt > threshold
        assert f"{match.group(2)}%" == f"{float(np.mean(long)):.0%}"
        assert f"{match.group(3)}%" == f"{float(prompt[long].sum() / prompt.sum()):.0%}"
        # The shares follow from the lognormal through the stated p50 and p95: its tail above
        # the threshold, by count and by tokens (the token-weighted tail shifts by sigma).
        sigma = math.log(24000 / 6000) / Z95
        z = math.log(threshold / 6000) / sigma
        by_count = 0.5 * math.erfc(z / math.sqrt(2))
        by_tokens = 0.5 * math.erfc((z - sigma) / math.sqrt(2))
        assert int(match.group(2)) / 100 == pytest.approx(by_count, abs=0.05)
        assert int(match.group(3)) / 100 == pytest.approx(by_tokens, abs=0.07)


@pytest.mark.parametrize("max_prompt_tokens", [96_000, None])
def test_the_memo_states_the_lognormal_it_draws_lengths_from(
    max_prompt_tokens: int | None,
) -> None:
    # The memo showed sampled means and p95s but never said that p50 and p95 were read as a
    # lognormal: another shape through the same two points moves the mean (the cost, the KV)
    # and the tail (the long pool).
    echo = parse(_code(max_prompt_tokens)).model_dump(mode="json")
    report = {
        "workloads": {
            "code": {
                "kind": "longctx",
                "traffic": {"avg_per_s": 3, "peak_per_s": 12},
                "prompt_tokens": {"mean": 8779, "p50": 6254, "p95": 23689},
                "output_tokens": {"mean": 342, "p50": 265, "p95": 883},
                "planned_prefix_hit_rate": 0.3,
                "ideal_prefix_hit_rate": 0.31,
            }
        },
        "requirements": echo,
    }
    text = "\n".join(_workloads(report))
    sigma = math.log(24000 / 6000) / Z95
    cut = max_prompt_tokens or 4 * 24000
    assert (
        f"code: prompt lengths are lognormal through p50 6,000 and p95 24,000 "
        f"(sigma {sigma:.2f}): mean {6000 * math.exp(sigma**2 / 2):,.0f}, "
        f"p99 {6000 * math.exp(Z99 * sigma):,.0f}, cut at {cut:,}" in text
    )
    out_sigma = math.log(900 / 250) / Z95
    assert f"output lengths lognormal through p50 250 and p95 900 (sigma {out_sigma:.2f})" in text


def test_the_memo_names_the_chosen_layout() -> None:
    # A split plan's memo listed pools `code` and `code-long` with no word of the length they
    # split at or the share of traffic each takes; the runners-up had both.
    report = build_report(make_plan(parse(small_requirements()), verify=False), sensitivity=False)
    layout = report["search"]["chosen"]["layout"]
    assert f"Chosen layout: {layout}." in render_memo(report, {})

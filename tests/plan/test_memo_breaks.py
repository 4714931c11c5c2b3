"""'Breaks at' in the memo's "what would invalidate the plan" reads in the workload's units."""

from typing import Any

from inhouse.plan.memo import _sensitivity


def _row(name: str, change: str, at: float | None) -> dict[str, Any]:
    return {
        "name": name,
        "change": change,
        "first_break": None,
        "breaks_at_size": at,
        "triggers": [],
        "trigger": "watch it",
    }


def test_breaks_at_names_the_prompt_length_rate_and_hit_rate_it_means() -> None:
    # "p95 prompt 1.7x longer | ... | 1.14x" left the reader to multiply: at what p95 prompt, in
    # tokens, does the plan stop holding?
    report = {
        "workloads": {
            "code": {
                "prompt_tokens": {"p95": 23_689.0},
                "planned_prefix_hit_rate": 0.3,
                "arrival_cv2": 1.0,
                "traffic": {"peak_per_s": 12.0, "avg_per_s": 3.0},
            },
            "chat": {
                "prompt_tokens": {"p95": 15_710.0},
                "planned_prefix_hit_rate": 0.85,
                "arrival_cv2": 1.0,
                "traffic": {"peak_sessions": 100, "avg_sessions": 70, "think_time_s": 3.0},
            },
        },
        "sensitivity": [
            _row("prompt_p95_1.7x", "p95 prompt 1.7x longer (p50 kept)", 1.14),
            _row("prefix_hit_halved", "prefix-cache hit rate halved", 0.73),
            _row("traffic_2x", "peak traffic doubled", 1.36),
            _row("burstiness_2x", "arrivals twice as bursty (CV² x2)", None),
        ],
    }
    text = "\n".join(_sensitivity(report, {}))
    assert (
        f"1.14x (p95 prompt: code {23_689 * 1.14:,.0f}, chat {15_710 * 1.14:,.0f} tokens)" in text
    )
    assert f"0.73x (prefix hit rate: code {0.3 * 0.73:.0%}, chat {0.85 * 0.73:.0%})" in text
    assert f"1.36x (peak: code {12 * 1.36:.2f} req/s, chat {100 * 1.36:.0f} sessions)" in text
    assert "| arrivals twice as bursty (CV² x2) | holds | — |" in text

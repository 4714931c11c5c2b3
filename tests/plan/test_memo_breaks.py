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
                "output_tokens": {"p95": 912.0},
                "planned_prefix_hit_rate": 0.3,
                "arrival_cv2": 1.0,
                "traffic": {"peak_per_s": 12.0, "avg_per_s": 3.0},
            },
            "chat": {
                "prompt_tokens": {"p95": 15_710.0},
                "output_tokens": {"p95": 1_804.0},
                "planned_prefix_hit_rate": 0.85,
                "arrival_cv2": 1.0,
                "traffic": {"peak_sessions": 100, "avg_sessions": 70, "think_time_s": 3.0},
            },
        },
        "sensitivity": [
            _row("prompt_p95_1.7x", "p95 prompt 1.7x longer (p50 kept)", 1.14),
            _row("output_p95_1.7x", "p95 output 1.7x longer (p50 kept)", 1.41),
            _row("prefix_hit_halved", "prefix-cache hit rate halved", 0.73),
            _row("traffic_2x", "peak traffic doubled", 1.36),
            _row("burstiness_2x", "arrivals twice as bursty (CV² x2)", None),
        ],
    }
    text = "\n".join(_sensitivity(report, {}))
    assert (
        f"1.14x (p95 prompt: code {23_689 * 1.14:,.0f}, chat {15_710 * 1.14:,.0f} tokens)" in text
    )
    # Longer answers, too: at what p95 output does it break?
    assert f"1.41x (p95 output: code {912 * 1.41:,.0f}, chat {1_804 * 1.41:,.0f} tokens)" in text
    assert f"0.73x (prefix hit rate: code {0.3 * 0.73:.0%}, chat {0.85 * 0.73:.0%})" in text
    assert f"1.36x (peak: code {12 * 1.36:.2f} req/s, chat {100 * 1.36:.0f} sessions)" in text
    assert "| arrivals twice as bursty (CV² x2) | holds | — |" in text


def test_a_bucket_read_trigger_level_is_told_apart_from_the_sampled_p95() -> None:
    # Section 1 gave the code prompt's p95 as 23,689 tokens and section 7 "planned 33,130
    # tokens" for the same p95, as histogram_quantile reads it between vLLM's 20,000 and
    # 50,000 buckets, with no word on why: the trigger at 34,831 looked past the 27,057 break.
    trigger = {
        "change": "prompt_p95_1.7x",
        "change_text": "p95 prompt 1.7x longer (p50 kept)",
        "signal": "prompt_tokens_p95",
        "pool": "code",
        "model": "code",
        "workloads": ["code"],
        "threshold": 34_831,
        "planned": 33_130,
        "window": "1d",
        "hold": "1h",
        "breaks_at": 1.14,
    }
    row = _row("prompt_p95_1.7x", "p95 prompt 1.7x longer (p50 kept)", 1.14)
    row["triggers"] = [trigger]
    report = {
        "workloads": {
            "code": {
                "prompt_tokens": {"p95": 23_689.0},
                "planned_prefix_hit_rate": 0.3,
                "arrival_cv2": 1.0,
                "traffic": {"peak_per_s": 12.0, "avg_per_s": 3.0},
            }
        },
        "sensitivity": [row],
        "pools": [{"name": "code", "role": "standard", "long_prompt_tokens": None}],
    }
    text = "\n".join(_sensitivity(report, {}))
    assert "histogram_quantile" in text
    assert "code's sampled p95 prompt of 23,689 tokens reads as 33,130" in text


def test_a_pool_with_part_of_the_prompts_gets_no_whole_workload_comparison() -> None:
    # Split at a prompt length, the standard pool's p95 is of the short prompts only.
    row = _row("prompt_p95_1.7x", "p95 prompt 1.7x longer (p50 kept)", None)
    row["triggers"] = [
        {
            "change": "prompt_p95_1.7x",
            "change_text": "p95 prompt 1.7x longer (p50 kept)",
            "signal": "prompt_tokens_p95",
            "pool": "code",
            "model": "code",
            "workloads": ["code"],
            "threshold": 12_000,
            "planned": 9_000,
        }
    ]
    report = {
        "workloads": {"code": {"prompt_tokens": {"p95": 23_689.0}}},
        "sensitivity": [row],
        "pools": [{"name": "code", "role": "standard", "long_prompt_tokens": 11_264}],
    }
    assert "histogram_quantile" not in "\n".join(_sensitivity(report, {}))


def test_the_assumptions_not_re_forecast_are_listed_with_their_figures() -> None:
    # Section 7 re-forecast prompts, hits, bursts, traffic, TP and FP8; the output lengths and
    # the fallback model's quality, which the plan also rests on, went unmentioned.
    report = {
        "workloads": {},
        "sensitivity": [],
        "requirements": {
            "workloads": [
                {
                    "name": "code",
                    "output_tokens": {"p50": 250, "p95": 900},
                    "models": {"fallback": "Llama-3.1-8B"},
                },
                {"name": "chat", "output_tokens": {"p50": 250, "p95": 800}, "models": {}},
            ]
        },
    }
    text = "\n".join(_sensitivity(report, {}))
    assert "Not re-forecast, though the plan rests on them:" in text
    assert "the fallback model's quality (code: Llama-3.1-8B" in text


def test_output_lengths_are_re_forecast_not_listed_as_unexamined() -> None:
    # Section 7 now has a row for longer answers; the note must stop saying it has none.
    report = {
        "workloads": {},
        "sensitivity": [_row("output_p95_1.7x", "p95 output 1.7x longer (p50 kept)", None)],
        "requirements": {
            "workloads": [{"name": "code", "output_tokens": {"p50": 250, "p95": 900}}]
        },
    }
    text = "\n".join(_sensitivity(report, {}))
    assert "| p95 output 1.7x longer (p50 kept) | holds | — |" in text
    assert "output lengths (code p95 900" not in text.split("Not re-forecast")[1]


def test_a_bucket_read_output_level_is_told_apart_from_the_sampled_p95() -> None:
    # The output trigger reads vLLM's generation-token buckets the way the prompt one reads
    # the prompt buckets: its planned p95 is not section 1's either.
    trigger = {
        "change": "output_p95_1.7x",
        "change_text": "p95 output 1.7x longer (p50 kept)",
        "signal": "output_tokens_p95",
        "pool": "code",
        "model": "code",
        "workloads": ["code"],
        "threshold": 1_310,
        "planned": 1_160,
    }
    row = _row("output_p95_1.7x", "p95 output 1.7x longer (p50 kept)", None)
    row["triggers"] = [trigger]
    report = {
        "workloads": {"code": {"output_tokens": {"p95": 912.0}}},
        "sensitivity": [row],
        "pools": [{"name": "code", "role": "standard", "long_prompt_tokens": None}],
    }
    text = "\n".join(_sensitivity(report, {}))
    assert f"code's sampled p95 output of {912:,} tokens reads as {1_160:,}" in text

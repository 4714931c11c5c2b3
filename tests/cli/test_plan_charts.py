"""The sizing memo's latency chart draws every target the SLO table holds, the long prompts'
own TTFT included (it drew `slo_check.targets` only, and the long-prompt row was missing)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from inhouse.cli._plan_charts import _latency


def _metrics(ttft: float, long_ttft: float) -> dict[str, Any]:
    return {
        "ttft": {"p95_ms": ttft, "target_ms": 1000.0},
        "long_ttft": {"p95_ms": long_ttft, "target_ms": 4000.0},
    }


def test_the_latency_chart_draws_the_long_prompts_ttft_against_its_own_target() -> None:
    report = {
        "slo_check": {
            "targets": {"code": {"ttft": {"target_ms": 1000.0, "alarm_ms": 1250.0}}},
            "long_prompts": {
                "code": {
                    "above_tokens": 16384,
                    "ttft": {"target_ms": 4000.0, "alarm_ms": 5000.0},
                }
            },
            "1x": {"workloads": {"code": {"metrics": _metrics(500.0, 2000.0)}}},
            "2x": {"workloads": {"code": {"metrics": _metrics(2000.0, 8000.0)}}},
        }
    }
    fig = _latency(report)
    lines = {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].lines}
    plt.close(fig)
    assert lines["code p95 ttft"] == [0.5, 2.0]
    assert lines["code p95 ttft (long prompts)"] == [0.5, 2.0]  # 2,000 and 8,000 of 4,000

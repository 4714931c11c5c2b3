"""The live soak's bounds, judged from its windows (no stack needed)."""

from __future__ import annotations

from types import SimpleNamespace

from inhouse.drill.drills.soak import _check_live
from inhouse.drill.evidence import DrillResult


def _window(i: int, requests: int, p95_ms: float, procs: tuple[str, ...]) -> dict[str, float]:
    row = {"t0": 10.0 * i, "t1": 10.0 * (i + 1), "hit_rate": 0.8, "p95_ttft_ms": p95_ms,
           "p95_low_ms": p95_ms * 0.9, "num_requests": float(requests)}  # fmt: skip
    for name in procs:
        row[f"{name}.rss_mib"], row[f"{name}.fds"] = 200.0, 40.0
    return row


def _judge(rows: list[dict[str, float]]) -> dict[str, bool]:
    result = DrillResult("soak", "", "")
    _check_live(SimpleNamespace(result=result), rows)  # type: ignore[arg-type]
    return {c.name: c.ok for c in result.checks}


ALL = ("gateway", "chat-0", "chat-1")


def test_a_steady_soak_passes() -> None:
    checks = _judge([_window(i, 30, 400.0, ALL) for i in range(4)])
    assert checks == {"every process to the end": True, "memory flat": True,
                      "descriptors flat": True, "p95 TTFT stable": True}  # fmt: skip


def test_windows_in_which_nothing_streamed_fail_the_p95_check() -> None:
    # every request failing after the first window: no TTFT, a p95 of 0 ms was "stable"
    rows = [_window(0, 30, 400.0, ALL), _window(1, 30, 410.0, ALL)]
    rows += [_window(i, 0, 0.0, ALL) for i in (2, 3)]
    assert _judge(rows)["p95 TTFT stable"] is False


def test_an_engine_that_died_fails_the_soak() -> None:
    # chat-1 gone by the last window: its RSS and descriptors were skipped, both bounds passed
    rows = [_window(i, 30, 400.0, ALL) for i in range(3)]
    rows.append(_window(3, 30, 400.0, ("gateway", "chat-0")))
    checks = _judge(rows)
    assert not all(checks.values()) and checks["every process to the end"] is False


def test_a_virtual_soak_that_served_nothing_fails() -> None:
    # Every request failing, every day: each metric reads 0, the drift rule skips a metric at
    # 0, and "virtual soak ran" counted days only: the drill passed.
    from inhouse.drill.drills.soak import judge_virtual
    from inhouse.drill.soak_virtual import DayStats, soak_report

    def verdict(days: list[DayStats]) -> dict[str, bool]:
        result = DrillResult("soak", "", "")
        ctx = SimpleNamespace(result=result, soak_day_s=None)
        judge_virtual(ctx, soak_report(days, {"wall_s": 10.0}), 2)  # type: ignore[arg-type]
        return {c.name: c.ok for c in result.checks}

    dead = [DayStats(d, 5000, 5000, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0) for d in (1, 2)]
    assert verdict(dead) == {"virtual soak ran": False, "no drift day over day": True}
    alive = [DayStats(d, 5000, 3, 310.0, 30.0, 0.8, 0.2, 0.3, 1.0) for d in (1, 2)]
    assert verdict(alive) == {"virtual soak ran": True, "no drift day over day": True}

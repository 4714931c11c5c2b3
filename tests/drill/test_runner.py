"""`run_drills`' summary.json: how the drills ran, for `inhouse report` to say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inhouse.drill import runner
from inhouse.drill.evidence import DrillResult


@pytest.mark.parametrize("day_s", [900.0, None])
def test_the_summary_records_the_soak_s_day_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, day_s: float | None
) -> None:
    """`--soak-day-s` shortened the soak's days and only the soak's check text said so: the
    summary, which `inhouse report` reads for how the drills ran, did not."""

    async def no_drills(
        options: runner.Options, prepared: runner.Prepared, say: object
    ) -> list[DrillResult]:
        return []

    monkeypatch.setattr(runner, "_run_all", no_drills)
    options = runner.Options(["soak"], tmp_path, soak_day_s=day_s)
    runner.run_drills(options, say=lambda _: None)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "soak_day_s" in summary and summary["soak_day_s"] == day_s

"""`run_drills`' summary.json: how the drills ran, for `inhouse report` to say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inhouse.drill import runner
from inhouse.drill.evidence import DrillResult
from inhouse.drill.report import write_summary
from inhouse.errors import SpecError


@pytest.mark.parametrize("day_s", [900.0, None])
def test_the_summary_records_the_soak_s_day_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, day_s: float | None
) -> None:
    """`--soak-day-s` shortened the soak's days and only the soak's check text said so: the
    summary, which `inhouse report` reads for how the drills ran, did not."""

    async def no_drills(
        options: runner.Options, prepared: runner.Prepared, say: object, *record: object
    ) -> list[DrillResult]:
        return []

    monkeypatch.setattr(runner, "_run_all", no_drills)
    options = runner.Options(["soak"], tmp_path, soak_day_s=day_s)
    runner.run_drills(options, say=lambda _: None)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "soak_day_s" in summary and summary["soak_day_s"] == day_s


@pytest.mark.parametrize("name", ["kill-replica", "load-not-ready"])
def test_a_drill_that_takes_a_replica_out_refuses_a_pool_of_one(name: str, tmp_path: Path) -> None:
    """kill-replica and load-not-ready take the drilled pool's last replica out and judge the
    others serving its traffic; with one replica they ran for minutes and failed on checks
    that could not hold ("no failure before the first token"). They are refused up front,
    naming the pool, before any file is written; the other drills still run on such a pool."""
    example = Path(__file__).resolve().parents[2] / "examples/crm-copilot/stack.yaml"
    stack = tmp_path / "stack.yaml"
    stack.write_text(
        example.read_text()
        .replace("replicas: 2", "replicas: 1")
        .replace("gpu_ids: [[0, 1, 2, 3], [4, 5, 6, 7]]", "gpu_ids: [[0, 1, 2, 3]]")
    )
    options = runner.Options([name, "kv-fill"], tmp_path / "out", stack_path=stack)
    with pytest.raises(SpecError, match=f"pool chat has 1 replica: {name} takes"):
        runner.prepare(options)
    assert not (tmp_path / "out").exists()
    runner.prepare(runner.Options(["kv-fill"], tmp_path / "out", stack_path=stack))


def test_a_run_that_dies_never_leaves_the_last_runs_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """summary.json and drills.md were written once, after the last drill: a run that died on
    the way (the judge did not start, a crash, Ctrl-C) left the previous run's "7 of 7
    passed" in the evidence directory, beside this run's new evidence. From the start of a
    run they say it has not finished, and list each drill as it ends."""
    from inhouse.drill.judge import JudgeError

    old = DrillResult("kv-fill", "2026-01-01T00:00:00+00:00", "demo")
    old.check("KV page", "page", "received", True)
    write_summary([old] * 7, tmp_path, {"stack": "demo", "started": "last month"})
    assert "7 of 7 passed" in (tmp_path / "drills.md").read_text()

    async def dies_after_one(
        options: runner.Options, prepared: runner.Prepared, say: object, *record: object
    ) -> list[DrillResult]:
        done = DrillResult("kill-replica", "2026-02-01T00:00:00+00:00", "demo")
        done.check("no request fails", "0", "3 failed", False)
        if record:
            record[0](done)  # type: ignore[operator]
        raise JudgeError("Prometheus exited with code 1")

    monkeypatch.setattr(runner, "_run_all", dies_after_one)
    options = runner.Options(["kill-replica", "kv-fill", "soak"], tmp_path)
    with pytest.raises(JudgeError):
        runner.run_drills(options, say=lambda _: None)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["finished"] is False
    assert [d["drill"] for d in summary["drills"]] == ["kill-replica"]
    assert summary["planned"] == ["kill-replica", "kv-fill", "soak"]
    assert (summary["passed"], summary["failed"]) == (0, 1)
    drills_md = (tmp_path / "drills.md").read_text()
    assert "not finished" in drills_md.splitlines()[0] and "7 of 7" not in drills_md

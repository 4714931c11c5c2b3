from __future__ import annotations

from pathlib import Path

import pytest

from inhouse.cli._report_inputs import load_inputs
from inhouse.render import render_stack
from inhouse.report.inputs import RenderOutput, ReportInputs
from inhouse.spec.load import load_stack

from .report_fixtures import write_all


@pytest.fixture(scope="session")
def report_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_all(tmp_path_factory.mktemp("report-inputs"))


def make_inputs(
    dirs: dict[str, Path],
    *,
    drills: bool = True,
    benches: tuple[str, ...] = ("chat", "cold", "utility"),
) -> ReportInputs:
    stack = load_stack(dirs["plan"] / "stack.yaml")
    render = RenderOutput("deploy", render_stack(stack).files)
    return load_inputs(
        dirs["plan"], [dirs[b] for b in benches], dirs["drills"] if drills else None, render
    )


@pytest.fixture(scope="session")
def inputs(report_dirs: dict[str, Path]) -> ReportInputs:
    return make_inputs(report_dirs)

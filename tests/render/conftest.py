from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from inhouse.cli.plan import load_requirements
from inhouse.plan.memo import render_memo
from inhouse.plan.planner import Plan, make_plan
from inhouse.plan.report import build_report, final_stack
from inhouse.render import Rendered, render_stack
from inhouse.spec.load import load_stack
from inhouse.spec.stack import StackSpec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ("crm-copilot", "code-assistant")


@pytest.fixture(scope="session")
def crm_stack() -> StackSpec:
    return load_stack(ROOT / "examples" / "crm-copilot" / "stack.yaml")


@pytest.fixture(scope="session")
def rendered() -> dict[str, Rendered]:
    """Every example stack, rendered with the default options."""
    return {
        name: render_stack(load_stack(ROOT / "examples" / name / "stack.yaml")) for name in EXAMPLES
    }


@pytest.fixture(scope="session")
def crm(rendered: dict[str, Rendered]) -> Rendered:
    return rendered["crm-copilot"]


@pytest.fixture
def write_rendered(tmp_path: Path):  # type: ignore[no-untyped-def]
    def write(files: dict[str, str]) -> Path:
        for relative, text in files.items():
            path = tmp_path / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return tmp_path

    return write


@dataclass(frozen=True)
class PlannedExample:
    """`inhouse plan` of an example's requirements, as the CLI writes it: the plan, plan.json's
    content, the memo and the stack file (with its workloads and triggers)."""

    plan: Plan
    report: dict[str, Any]
    memo: str
    stack: StackSpec


PlannedCrm = PlannedExample  # the CRM example's, which most tests here read


def plan_example(example: str) -> PlannedExample:
    path = ROOT / "examples" / example / "requirements.yaml"
    plan = make_plan(load_requirements(path))
    report = build_report(plan, stack_path="stack.yaml")
    return PlannedExample(plan, report, render_memo(report, {}), final_stack(plan, report))


@pytest.fixture(scope="session")
def crm_plan() -> PlannedExample:
    return plan_example("crm-copilot")


@pytest.fixture(scope="session")
def code_assistant_plan() -> PlannedExample:
    """The code assistant's plan: a 70B pool that fails over onto an 8B `role: fallback` pool."""
    return plan_example("code-assistant")

"""Capacity planning: requirements in, a verified stack, its numbers and a sizing memo out.

`make_plan` characterizes the workloads, searches pool layouts and configurations analytically
(memory, Little's law, queues, the step-time model), verifies the best in the fleet simulator and
stresses the chosen stack; `build_report` turns the plan into `plan.json`'s dictionary and
`render_memo` into the sizing memo. Pure: no files, no clock. See docs/plan.md.
"""

from inhouse.plan.memo import render_memo
from inhouse.plan.planner import Plan, PlanInfeasibleError, make_plan
from inhouse.plan.report import build_report
from inhouse.plan.requirements import REQUIREMENTS_VERSION, Requirements, parse_requirements

__all__ = [
    "REQUIREMENTS_VERSION",
    "Plan",
    "PlanInfeasibleError",
    "Requirements",
    "build_report",
    "make_plan",
    "parse_requirements",
    "render_memo",
]

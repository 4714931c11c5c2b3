"""Size a serving stack from a requirements file: `inhouse plan REQUIREMENTS.yaml --out DIR`.

Writes `DIR/stack.yaml` (runs under `inhouse up` and `inhouse simulate`), `DIR/plan.json` (every
number, with the cost arithmetic) and `DIR/sizing-memo.md` with its charts. An impossible
requirement exits non-zero with the binding constraint named. See docs/plan.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from inhouse.plan.memo import render_memo
from inhouse.plan.planner import PlanInfeasibleError, make_plan
from inhouse.plan.report import build_report, final_stack
from inhouse.plan.requirements import Requirements, parse_requirements
from inhouse.spec.load import read_spec_text, resolve_local_models
from inhouse.spec.stack import dump_stack
from inhouse.spec.yaml_load import load_yaml

COMMAND = "plan"
HELP = "size a stack from workloads, SLOs and prices: stack.yaml, plan.json, sizing memo"
EXIT_INFEASIBLE = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("requirements", type=Path, help="requirements YAML (docs/plan.md)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="analytic plan only: skip the fleet-simulator checks (fast, unverified)",
    )
    parser.add_argument(
        "--no-sensitivity", action="store_true", help="skip the what-would-invalidate-it runs"
    )
    parser.add_argument("--no-charts", action="store_true", help="write the memo without PNGs")
    parser.add_argument(
        "--compare",
        nargs="?",
        const="layout,engine",
        metavar="AXES",
        help="also plan alternative architectures (layout: LoRA adapters vs a pool of their "
        "own; engine: vllm vs sglang) into compare.json and compare.md",
    )


def load_requirements(path: Path) -> Requirements:
    data = load_yaml(read_spec_text(path, "requirements file"), str(path))
    requirements = parse_requirements(data, str(path))
    resolve_local_models(
        name
        for workload in requirements.workloads
        for name in (*workload.models.allowed, workload.models.fallback)
        if name is not None
    )
    return requirements


def run(args: argparse.Namespace) -> int:
    requirements = load_requirements(args.requirements)
    try:
        plan = make_plan(requirements, verify=not args.no_verify)
    except PlanInfeasibleError as exc:
        print(f"inhouse plan: infeasible: {exc}", file=sys.stderr)
        return EXIT_INFEASIBLE
    out: Path = args.out
    command = f"inhouse plan {args.requirements} --out {out}"
    report = build_report(
        plan,
        sensitivity=not args.no_sensitivity,
        command=command,
        stack_path=str(out / "stack.yaml"),
    )
    stack = final_stack(plan, report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stack.yaml").write_text(_stack_header(args) + dump_stack(stack), encoding="utf-8")
    (out / "plan.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    charts: dict[str, str] = {}
    if not args.no_charts:
        from inhouse.cli._plan_charts import write_charts

        charts = write_charts(report, out)
    memo = render_memo(report, charts)
    (out / "sizing-memo.md").write_text(memo, encoding="utf-8")
    if args.compare:
        _write_compare(requirements, report, args.compare, out, verify=not args.no_verify)
    cost = report["cost"]
    print(
        f"{requirements.name}: {plan.chosen.label}; ${cost['usd_per_hour']:,.2f}/h -> "
        f"{out}/stack.yaml, plan.json, sizing-memo.md"
    )
    return 0


def _stack_header(args: argparse.Namespace) -> str:
    return (
        f"# Written by `inhouse plan {args.requirements}`; the sizing memo next to this file "
        "explains every number.\n"
    )


def _write_compare(
    requirements: Requirements, report: dict[str, object], axes: str, out: Path, verify: bool
) -> None:
    from inhouse.plan.compare import compare
    from inhouse.report.alternative import compare_markdown

    result = compare(
        requirements, report, [a.strip() for a in axes.split(",") if a.strip()], verify
    )
    (out / "compare.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "compare.md").write_text(
        compare_markdown(result, str(out / "compare.json")), encoding="utf-8"
    )
    for alt in result["alternatives"]:
        state = f"${alt['usd_per_hour']:,.2f}/h" if alt.get("feasible") else "infeasible"
        print(f"  alternative ({alt['axis']}): {alt['label']}: {state}")

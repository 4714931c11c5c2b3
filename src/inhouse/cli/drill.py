"""The seven failure drills, run against a live stack and judged by a real Prometheus and
Alertmanager; or written out as exact commands for a production cluster.

    inhouse drill list
    inhouse drill run kill-replica kv-fill --out drills/     # the built-in demo stack
    inhouse drill all --quick --out drills/                   # all seven, in minutes
    inhouse drill run all --stack out/crm/stack.yaml --out drills/
    inhouse drill plan --stack out/crm/stack.yaml --out drill-plan/

Exit 0 only if every drill run passed. Evidence in DIR/NAME/ (evidence.json, timeline.png,
report.md), DIR/summary.json and DIR/drills.md. See docs/drill.md.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from inhouse.drill.catalog import DRILLS
from inhouse.errors import SpecError

COMMAND = "drill"
HELP = "run the seven failure drills against a live stack (real Prometheus and Alertmanager)"


def _run_flags(parser: argparse.ArgumentParser, names: bool) -> None:
    if names:
        parser.add_argument("names", nargs="+", metavar="NAME", help="drill names, or all")
    parser.add_argument("--stack", type=Path, help="stack file (default: the built-in demo)")
    parser.add_argument("--out", type=Path, default=Path("drills"), help="evidence directory")
    parser.add_argument("--quick", action="store_true", help="short phases; soak: two days")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="factor on the rules' `for:` and range windows (default 0.1)",
    )
    parser.add_argument("--duration", type=float, help="the live soak's length in seconds")
    parser.add_argument(
        "--soak-day-s",
        type=float,
        metavar="S",
        help="a simulated soak day of S seconds, not 24 h: a smoke test of the drill itself "
        "(CI); the evidence says the days were shortened",
    )
    parser.add_argument("--attach", metavar="URL", help="drill a running stack's gateway")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="drill_command", metavar="{list,run,all,plan}")
    sub.add_parser("list", help="the seven drills")
    _run_flags(sub.add_parser("run", help="run drills by name (or all)"), names=True)
    _run_flags(sub.add_parser("all", help="run all seven"), names=False)
    plan = sub.add_parser("plan", help="the drills as commands for a production cluster")
    plan.add_argument("--stack", type=Path, required=True, help="stack file")
    plan.add_argument("--out", type=Path, required=True, help="output directory")
    plan.add_argument("--namespace", help="Kubernetes namespace (default: the stack's name)")


def run(args: argparse.Namespace) -> int:
    command = args.drill_command
    if command == "list":
        for info in DRILLS:
            print(f"{info.name:16} {info.title}")
        return 0
    if command == "plan":
        return _plan(args)
    if command in ("run", "all"):
        return _run(args, ["all"] if command == "all" else args.names)
    print("inhouse drill: give list, run, all or plan (see --help)", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace, names: list[str]) -> int:
    from inhouse.drill.runner import (
        DEFAULT_TIME_SCALE,
        Options,
        prepare,
        resolve_names,
        run_drills,
    )

    if args.soak_day_s is not None and not 0 < args.soak_day_s < math.inf:
        raise SpecError(
            f"--soak-day-s {args.soak_day_s:g}: a simulated day's length in seconds, more than "
            "0 and finite (leave it out for 24 h days)"
        )
    if args.duration is not None and not 0 < args.duration < math.inf:
        raise SpecError(
            f"--duration {args.duration:g}: the live soak's length in seconds, more than 0 "
            "(default 600; 60 with --quick)"
        )
    if args.attach:
        raise SpecError(
            "--attach: not in this build; drills start their own stack (the demo, or --stack) "
            "because five of the seven signal or restart processes. Use `inhouse drill plan` "
            "for a stack you cannot restart."
        )
    options = Options(
        names=resolve_names(names),
        out_dir=args.out,
        stack_path=args.stack,
        quick=args.quick,
        time_scale=DEFAULT_TIME_SCALE if args.time_scale is None else args.time_scale,
        soak_duration_s=args.duration,
        soak_day_s=args.soak_day_s,
    )
    prepared = prepare(options)  # a refused run leaves no --out behind
    make_out_dir(args.out)
    results = run_drills(options, prepared=prepared)
    passed = sum(1 for r in results if r.verdict == "pass")
    print(
        f"inhouse drill: {passed} of {len(results)} passed; evidence in {args.out}/ "
        f"(drills.md, summary.json)"
    )
    return 0 if passed == len(results) else 1


def _plan(args: argparse.Namespace) -> int:
    from inhouse.drill.prodplan import agent_load, write_plan
    from inhouse.render import RenderOptions
    from inhouse.spec.load import load_stack

    stack = load_stack(args.stack)
    load = agent_load(stack, args.stack)  # a bad plan.json beside it: said before any file
    make_out_dir(args.out)
    result = write_plan(stack, args.out, RenderOptions(namespace=args.namespace), load)
    for check in result.validations:
        print(f"  [{'ok' if check.ok else 'FAIL'}] {check.name}: {check.detail}")
    print(
        f"inhouse drill plan: {len(result.validations)} offline checks, "
        f"{'all passed' if result.ok else 'some FAILED'}; see {args.out}/drills.md"
    )
    return 0 if result.ok else 1


def make_out_dir(path: Path) -> None:
    """`--out`, created if missing; a clear error (not a traceback) when it cannot be."""
    if path.exists() and not path.is_dir():
        raise SpecError(f"--out {path}: not a directory; give a directory (made if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(
            f"--out {path}: cannot create it ({exc.strerror}); give a directory you can write to"
        ) from exc

"""Run drills: one stack and one judge for the session, each drill in turn, evidence for each.

Before each drill the stack is put back whole (every replica running and healthy, every fault
cleared), so a drill's verdict never depends on the one before it. A drill that raises is a
failed drill with the error as its failed check; the session goes on with the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib
import os
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from inhouse.drill.catalog import NAMES
from inhouse.drill.context import DrillContext, load_profile
from inhouse.drill.evidence import DrillResult
from inhouse.drill.judge import Judge
from inhouse.drill.report import write_drill, write_summary
from inhouse.drill.stack import LiveStack, check_simulated, drill_stack
from inhouse.drill.timescale import check_factor, scale_rules
from inhouse.errors import SpecError
from inhouse.launch.demo import demo_stack
from inhouse.render.layout import engine_layout
from inhouse.render.prometheus import layout_rules, rule_files
from inhouse.render.runbook import render_runbook
from inhouse.render.yamltext import dump_yaml
from inhouse.spec.load import load_stack
from inhouse.spec.stack import StackSpec

DrillFn = Callable[[DrillContext], Awaitable[None]]
DEFAULT_TIME_SCALE = 0.1


def drill_function(name: str) -> DrillFn:
    module = importlib.import_module(f"inhouse.drill.drills.{name.replace('-', '_')}")
    fn: DrillFn = module.run
    return fn


def resolve_names(names: Sequence[str]) -> list[str]:
    if list(names) == ["all"] or not names:
        return list(NAMES)
    if "all" in names:  # NOTE: else "unknown drill all; one of ... or all"
        raise SpecError(f"drill names {' '.join(names)}: `all` runs every drill; give it alone")
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise SpecError(f"unknown drill {', '.join(unknown)}; one of {', '.join(NAMES)} or all")
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Options:
    names: list[str]
    out_dir: Path
    stack_path: Path | None = None
    quick: bool = False
    time_scale: float = DEFAULT_TIME_SCALE
    soak_duration_s: float | None = None
    flood_limits: dict[str, int] | None = None  # tests: break the flood tenant's limits
    soak_day_s: float | None = None  # tests: a shorter simulated day for the virtual soak
    drop_alerts: tuple[str, ...] = ()  # tests: a rules file without these alerts


def _stack(options: Options) -> tuple[StackSpec, str]:
    if options.stack_path is None:
        return demo_stack(os.cpu_count() or 1), "built-in demo (crm-copilot-demo)"
    return load_stack(options.stack_path), str(options.stack_path)


def drill_rules(
    stack: StackSpec, namespace: str, out_dir: Path, factor: float, drop: tuple[str, ...] = ()
) -> str:
    """The stack's rendered rules (runbook links to DIR/runbook.md, written here too), scaled
    by `factor`; `drop` removes alerts by name (the tests' broken rules files)."""
    runbook = out_dir / "runbook.md"
    engines = engine_layout(stack)
    rules = layout_rules(stack, engines, namespace)
    runbook.write_text(render_runbook(stack, engines, rules[1], namespace), encoding="utf-8")
    text = rule_files(rules, runbook.resolve().as_uri())["prometheus/rules.yaml"]
    if drop:
        data = yaml.safe_load(text)
        for group in data["groups"]:
            group["rules"] = [r for r in group["rules"] if r.get("alert") not in drop]
        text = dump_yaml(data)
    (out_dir / "rules.rendered.yaml").write_text(text, encoding="utf-8")
    return scale_rules(text, factor)


async def restore(stack: LiveStack) -> None:
    """Every replica running, healthy, fault-free; the GPUs' held faults released."""
    for name, replica in stack.replicas.items():
        if not replica.is_running:
            stack.start_replica(name)
    await asyncio.to_thread(stack.wait_healthy, list(stack.replicas), 60.0)
    async with httpx.AsyncClient(timeout=5) as client:
        for replica in stack.replicas.values():
            with contextlib.suppress(httpx.HTTPError):
                await client.post(f"{replica.admin_url}/faults/clear", json={})
        with contextlib.suppress(httpx.HTTPError):
            await client.post(f"{stack.dcgm_admin_url}/faults/clear", json={})


async def run_one(
    name: str, stack: LiveStack, judge: Judge, options: Options, stack_desc: str
) -> DrillResult:
    result = DrillResult(name, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), stack_desc)
    result.prometheus = {
        "version": judge.version,
        "rules_file": str(judge.rules_path),
        "time_scale": options.time_scale,
    }
    profile = load_profile(stack.stack.pools[0], options.stack_path)
    ctx = DrillContext(
        result,
        stack,
        judge,
        profile,
        options.out_dir,
        options.quick,
        options.soak_duration_s,
        options.soak_day_s,
        options.time_scale,
    )
    try:
        await restore(stack)
        await drill_function(name)(ctx)
    except Exception as exc:  # a drill that breaks is a failed drill, with the reason kept
        result.check("drill ran to its end", "no error", f"{type(exc).__name__}: {exc}", False)
        result.notes.append(traceback.format_exc(limit=5))
    result.duration_s = ctx.now()
    write_drill(result, options.out_dir)
    return result


# Drills that take the pool's last replica out and judge the others serving meanwhile.
TAKE_A_REPLICA_OUT = ("kill-replica", "load-not-ready")


@dataclass(frozen=True)
class Prepared:
    """A run's stack, checked: the drill tenants added (`keys`: tenant -> key), `desc` for the
    evidence."""

    stack: StackSpec
    keys: dict[str, str]
    desc: str


def prepare(options: Options) -> Prepared:
    """Everything a run can be refused for, checked before any file is written (a refused run
    leaves no `--out`): the time scale, the stack file, the plan.json beside it, a pool of one
    replica for a drill that takes one out, its engines."""
    check_factor(options.time_scale)
    base, desc = _stack(options)
    load_profile(base.pools[0], options.stack_path)
    pool = base.pools[0]  # the pool every drill acts on
    lone = [n for n in options.names if n in TAKE_A_REPLICA_OUT]
    if pool.replicas < 2 and lone:
        raise SpecError(
            f"pool {pool.name} has {pool.replicas} replica: {', '.join(lone)} "
            f"{'takes' if len(lone) == 1 else 'take'} a replica out and judge"
            f"{'s' if len(lone) == 1 else ''} the others serving its traffic. Give the pool 2 "
            "or more replicas in a copy of the stack file, or leave "
            f"{'it' if len(lone) == 1 else 'them'} out"
        )
    check_simulated(base)
    stack, keys = drill_stack(base, options.flood_limits)
    return Prepared(stack, keys, desc)


async def _run_all(
    options: Options,
    prepared: Prepared,
    say: Callable[[str], None],
    record: Callable[[DrillResult], None] = lambda result: None,
) -> list[DrillResult]:
    """Start the stack and the judge, run each drill; `record` sees each result as it ends."""
    stack, keys, stack_desc = prepared.stack, prepared.keys, prepared.desc
    work = options.out_dir / "_run"
    live = LiveStack(stack, keys, work)
    say(
        f"inhouse drill: time scale {options.time_scale:g} (rules' `for:` and range windows "
        "only; thresholds as rendered)"
    )
    judge: Judge | None = None
    results: list[DrillResult] = []
    try:
        await asyncio.to_thread(live.start)
        rules = drill_rules(
            stack, live.namespace, options.out_dir, options.time_scale, options.drop_alerts
        )
        judge = Judge(work / "judge", rules, live.scrape_jobs())
        await asyncio.to_thread(judge.start)
        say(
            f"stack {stack.name} up at {live.gateway_url}; Prometheus {judge.version} at "
            f"{judge.prometheus_url}"
        )
        await asyncio.to_thread(judge.require_scraped)  # NOTE: its answer was ignored
        for name in options.names:
            say(f"== {name}")
            result = await run_one(name, live, judge, options, stack_desc)
            failed = ", ".join(result.failed_checks)
            say(
                f"   {result.verdict} in {result.duration_s:.0f} s"
                + (f": {failed}" if failed else "")
            )
            results.append(result)
            record(result)
    finally:
        if judge is not None:
            await asyncio.to_thread(judge.stop)
        await asyncio.to_thread(live.stop)
    return results


def run_drills(
    options: Options, say: Callable[[str], None] = print, prepared: Prepared | None = None
) -> list[DrillResult]:
    """Runs the drills; `prepared`: `prepare(options)`, if the caller made it already."""
    prepared = prepared or prepare(options)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    done: list[DrillResult] = []

    def summarize(finished: bool) -> None:
        meta = {
            "started": started,
            "duration_s": round(time.perf_counter() - t0, 1),
            "stack": str(options.stack_path or "built-in demo"),
            "quick": options.quick,
            "time_scale": options.time_scale,
            "soak_day_s": options.soak_day_s,  # null: the soak's simulated days are 24 h
            "planned": list(options.names),
            "finished": finished,
        }
        write_summary(done, options.out_dir, meta)

    def record(result: DrillResult) -> None:
        done.append(result)
        summarize(finished=False)

    # NOTE: from the start, a summary of this run, unfinished: a run that dies (the judge does
    # not start, a crash, Ctrl-C) must not leave the last run's verdicts beside its evidence.
    summarize(finished=False)
    results = asyncio.run(_run_all(options, prepared, say, record))
    done[:] = results
    summarize(finished=True)
    return results

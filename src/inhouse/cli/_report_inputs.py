"""Reads what `inhouse report` is built from into `ReportInputs` (the I/O edge of the report).

* `--plan DIR`: `plan.json`, `stack.yaml`, and `compare.json` when `plan --compare` wrote one;
* `--bench DIR` (repeatable): a run (`result.json`, `requests.jsonl`) or a directory of runs;
* `--drills DIR`: `summary.json` and `NAME/evidence.json` (+ `report.md`, a timeline PNG);
* `--render DIR`: every text file `inhouse render` wrote (`_report_render`).

A missing or malformed file is a `SpecError` naming the file and what to run to make it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, cast

import yaml

from inhouse.bench.records import unfinished
from inhouse.errors import SpecError
from inhouse.report.inputs import BenchRun, Doc, DrillRun, Drills, RenderOutput, ReportInputs
from inhouse.report.plan_schema import check_compare, check_plan


def _text(path: Path, hint: str) -> str:
    """A regular file's UTF-8 text; anything else (a directory, a FIFO that would block) is a
    `SpecError` naming the file."""
    if not path.exists():
        raise SpecError(f"{path} not found; {hint}")
    if not path.is_file():
        raise SpecError(f"{path} is not a regular file; {hint}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read {path}: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _json(path: Path, hint: str, *, constants: bool = False) -> Any:
    """The file's JSON; NaN and Infinity refused unless `constants` (the caller then finds
    them, and names where they are)."""
    try:
        return json.loads(_text(path, hint), parse_constant=None if constants else _no_constant)
    except ValueError as exc:  # JSONDecodeError, and NaN or Infinity
        raise SpecError(f"{path} is not valid JSON ({exc}); {hint}") from None


def load_plan(plan_dir: Path) -> dict[str, Any]:
    """plan.json, every field the report reads checked (`report.plan_schema`): a wrong one is
    named by its JSON path, with the fix."""
    path = plan_dir / "plan.json"
    hint = f"run `inhouse plan REQUIREMENTS --out {plan_dir}` first"
    plan = _json(path, hint, constants=True)
    again = f"run `inhouse plan REQUIREMENTS --out {plan_dir}` again (never edit plan.json)"
    if not isinstance(plan, dict) or "requirements" not in plan:
        raise SpecError(
            f"{path}: written by an older `inhouse plan` (no `requirements` key); {again}"
        )
    problem = check_plan(plan)
    if problem is not None:
        raise SpecError(f"{path}: {problem}; {again}")
    return plan


def load_compare(path: Path) -> dict[str, Any]:
    """compare.json (`inhouse plan --compare`), every field the report reads checked: a wrong
    one is named by its JSON path, with the fix."""
    again = (
        f"run `inhouse plan REQUIREMENTS --out {path.parent} --compare` again (never edit "
        "compare.json)"
    )
    data = _json(path, again, constants=True)
    problem = check_compare(data)
    if problem is not None:
        raise SpecError(f"{path}: {problem}; {again}")
    return cast(dict[str, Any], data)


def _jsonl(path: Path, hint: str) -> tuple[dict[str, Any], ...]:
    rows = []
    for number, line in enumerate(_text(path, hint).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, parse_constant=_no_constant)
        except ValueError as exc:
            raise SpecError(f"{path}:{number}: not a JSON line ({exc})") from None
        if not isinstance(row, dict):
            raise SpecError(f"{path}:{number}: not a request row (a JSON object); {hint}")
        _check_request(row, f"{path}:{number}", hint)
        rows.append(row)
    return tuple(rows)


def _is_non_negative(value: Any) -> bool:
    """A finite number at least 0 (not a boolean, not NaN)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _check_request(row: dict[str, Any], where: str, hint: str) -> None:
    """The fields the report reads from a requests.jsonl row: a latency, a count and a time are
    non-negative numbers, `success` a boolean."""
    if not isinstance(row.get("success"), bool):
        raise SpecError(f"{where}: `success` is {row.get('success')!r}, not true or false; {hint}")
    ok = row["success"]
    fields = {
        "cached_tokens": False,
        # a failed row's kind (warm or cold) where its server reported no cached tokens
        "ideal_cached_tokens": False,
        "t_sched_s": False,
        "ttft_ms": ok,
        # a successful row's e2e, output length and chunk gaps give the report's p95s
        "e2el_ms": ok,
        "output_len": False,
    }
    for key, required in fields.items():
        value = row.get(key)
        if value is None and not required:
            continue
        if not _is_non_negative(value):
            raise SpecError(f"{where}: `{key}` is {value!r}, not a non-negative number; {hint}")
    gaps = row.get("itl_ms")
    if gaps is not None and not (isinstance(gaps, list) and all(_is_non_negative(g) for g in gaps)):
        raise SpecError(
            f"{where}: `itl_ms` is {gaps!r}, not a list of non-negative numbers; {hint}"
        )


# The result.json figures the report reads: each a non-negative number or null.
RESULT_FIGURES = (
    ("completed",),
    ("failed",),
    *((f"p{p}_{key}_ms",) for key in ("ttft", "itl", "tpot", "e2el") for p in (50, 95, 99)),
    ("request_throughput",),
    ("output_throughput",),
    ("prefix_cache_hit_rate_server",),
    ("prefix_cache_hit_rate_client",),
    ("server_gauges", "kv_cache_usage_perc", "p50"),
    ("server_gauges", "kv_cache_usage_perc", "max"),
    ("workload", "duration_s"),
)


def _check_result(result: dict[str, Any], path: Path, hint: str) -> None:
    for parts in RESULT_FIGURES:
        value: Any = result
        for part in parts:
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and not _is_non_negative(value):
            raise SpecError(
                f"{path}: `{'.'.join(parts)}` is {value!r}, not a non-negative number; {hint}"
            )
    workload = result.get("workload")
    params = workload.get("params") if isinstance(workload, dict) else None
    for key, value in (("workload", workload), ("workload.params", params)):
        if value is not None and not isinstance(value, dict):
            raise SpecError(
                f"{path}: `{key}` is {value!r}, not an object as `inhouse bench` writes it; {hint}"
            )
    sessions = (params or {}).get("sessions")
    if sessions is not None and not str(sessions).isdigit():
        raise SpecError(f"{path}: `workload.params.sessions` is {sessions!r}, not a count; {hint}")
    run = result.get("run")
    window = run.get("counters_window_unix_s") if isinstance(run, dict) else None
    if window is not None and not (
        isinstance(window, list)
        and len(window) == 2
        and all(_is_non_negative(t) for t in window)
        and window[0] <= window[1]
    ):
        raise SpecError(
            f"{path}: `run.counters_window_unix_s` is {window!r}, not a [start, end] pair of "
            f"Unix seconds, start first; {hint}"
        )


# What `inhouse bench --out DIR` writes beside result.json: a directory holding one of these is
# a run, not a directory of runs.
RUN_FILES = ("requests.jsonl", "report.md", "report.html")


def _requests(result: dict[str, Any], path: Path, hint: str) -> tuple[dict[str, Any], ...]:
    """The run's requests.jsonl, which must be there and hold a row for each request
    result.json counts (`num_prompts`): a missing or cut file read as no successful request."""
    requests = path / "requests.jsonl"
    if not requests.exists():
        raise SpecError(
            f"{requests} not found beside {path / 'result.json'}: the TTFT and session rows "
            f"come from it; copy the whole run directory, or {hint}"
        )
    rows = _jsonl(requests, hint)
    expected = result.get("num_prompts")
    if isinstance(expected, int) and not isinstance(expected, bool) and expected != len(rows):
        raise SpecError(
            f"{requests}: {len(rows)} request rows, but {path / 'result.json'} `num_prompts` "
            f"is {expected} (a cut file, or another run's); {hint}"
        )
    ok = sum(1 for row in rows if row["success"])
    for key, counted, what in (
        ("completed", ok, "successful"),
        ("failed", len(rows) - ok, "failed"),
    ):
        stated = result.get(key)
        if isinstance(stated, int) and not isinstance(stated, bool) and stated != counted:
            raise SpecError(
                f"{requests}: {counted} {what} request rows, but {path / 'result.json'} `{key}` "
                f"is {stated} (an edited result.json, or another run's rows); {hint}"
            )
    return rows


def load_bench(path: Path) -> list[BenchRun]:
    hint = "run `inhouse bench ... --out DIR` and pass that DIR"
    problem = unfinished(path)
    if problem is not None:
        raise SpecError(f"{problem}; {hint} again")
    if (path / "result.json").exists():
        result = _json(path / "result.json", hint)
        if not isinstance(result, dict):
            raise SpecError(f"{path / 'result.json'}: not a bench result (a JSON object)")
        _check_result(result, path / "result.json", hint)
        rows = _requests(result, path, hint)
        return [
            BenchRun(
                path.name,
                Doc(str(path / "result.json"), result),
                rows,
                str(path / "requests.jsonl"),
            )
        ]
    if not path.is_dir():
        raise SpecError(f"--bench {path}: no such directory; {hint}")
    written = [name for name in RUN_FILES if (path / name).exists()]
    if written:
        raise SpecError(
            f"{path / 'result.json'} not found, though {path} has {', '.join(written)}: a bench "
            f"run without its result; copy the whole run directory, or {hint}"
        )
    runs = [r for child in sorted(path.iterdir()) if child.is_dir() for r in load_bench(child)]
    if not runs:
        raise SpecError(f"--bench {path}: no result.json in it or its subdirectories; {hint}")
    return runs


def _check_evidence(data: Any, path: Path) -> None:
    """`checks` and `alerts` as `inhouse drill` writes them: lists of objects."""
    shape = "needs `drill`, `verdict` and `checks`, a list of objects"
    if not isinstance(data, dict) or "checks" not in data:
        raise SpecError(f"{path}: not drill evidence ({shape})")
    for key in ("checks", "alerts"):
        items = data.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise SpecError(
                f"{path}: `{key}` is not a list of objects, as `inhouse drill` writes it; "
                "run the drill again"
            )
    _check_verdict(data, path)


def _check_verdict(data: dict[str, Any], path: Path) -> None:
    """`verdict` as `inhouse drill` decides it: `pass` only when there are checks and every
    one is ok (each `ok` a boolean). A verdict its checks contradict would be counted as a
    drill passed in the document's summary."""
    again = "run the drill again (`inhouse drill run NAME --stack STACK --out DIR`)"
    checks = data["checks"] or []
    for index, check in enumerate(checks):
        if not isinstance(check.get("ok"), bool):
            raise SpecError(
                f"{path}: `checks[{index}].ok` is {check.get('ok')!r}, not true or false; {again}"
            )
    verdict = data.get("verdict")
    if verdict not in ("pass", "fail"):
        raise SpecError(f"{path}: `verdict` is {verdict!r}, not 'pass' or 'fail'; {again}")
    if verdict != "pass":
        return
    if not checks:
        raise SpecError(f"{path}: `verdict` is 'pass' with no checks; {again}")
    for check in checks:
        if not check["ok"]:
            raise SpecError(
                f"{path}: `verdict` is 'pass' though check {check.get('name')!r} is not ok; {again}"
            )


def load_drills(path: Path, images: dict[str, bytes]) -> Drills:
    hint = "run `inhouse drill run all --out DIR` and pass that DIR"
    if not path.is_dir():
        raise SpecError(f"--drills {path}: no such directory; {hint}")
    summary = path / "summary.json"
    runs = []
    for child in sorted(path.iterdir()):
        evidence = child / "evidence.json"
        if not evidence.exists():
            continue
        data = _json(evidence, hint)
        _check_evidence(data, evidence)
        report = child / "report.md"
        timeline = next(iter(sorted(p for p in child.glob("*.png") if p.is_file())), None)
        linked = None
        if timeline is not None:
            linked = f"drills/{child.name}-{timeline.name}"
            try:
                images[linked] = timeline.read_bytes()
            except OSError as exc:
                raise SpecError(f"cannot read {timeline}: {exc}") from None
        runs.append(
            DrillRun(
                child.name,
                Doc(str(evidence), data),
                _text(report, hint) if report.exists() else None,
                linked,
            )
        )
    if not runs:
        raise SpecError(f"--drills {path}: no NAME/evidence.json in it; {hint}")
    seen: dict[str, str] = {}
    for run in runs:
        name = str(run.evidence.get("drill") or run.name)
        if name in seen:
            raise SpecError(
                f"--drills {path}: two evidence files for drill {name} ({seen[name]}, "
                f"{run.evidence.name}): the report would quote one of them; pass the directory "
                "of one `inhouse drill run` (move the other run's aside)"
            )
        seen[name] = run.evidence.name
    summary_doc = Doc(str(summary), _json(summary, hint)) if summary.exists() else None
    if summary_doc is not None:
        _check_one_run(path, summary_doc, seen)
    return Drills(str(path), summary_doc, tuple(runs))


def _check_one_run(path: Path, summary: Doc, evidence: dict[str, str]) -> None:
    """The evidence is the run's that wrote summary.json, and that run finished: a drill run
    over an earlier one's directory leaves the drills it did not run (or did not reach) with
    their old evidence, which the report would quote as this run's."""
    data = summary.data
    if not isinstance(data, dict):
        return
    if data.get("finished") is False:
        raise SpecError(
            f"--drills {path}: the drill run did not finish ({summary.name} says so; it ran "
            f"{len(data.get('drills') or [])} of {len(data.get('planned') or [])} drills); "
            "run the drills again"
        )
    listed = data.get("drills")
    if not isinstance(listed, list):
        return
    names = {str(d.get("drill")) for d in listed if isinstance(d, dict)}
    stale = sorted(name for name in evidence if name not in names)
    if stale:
        raise SpecError(
            f"--drills {path}: evidence of {', '.join(stale)}, but this run's summary.json does "
            "not list them: an earlier run left them. Move them aside, or run those drills "
            "again with the others"
        )


def _stack_name(path: Path) -> str | None:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return str(data["name"]) if isinstance(data, dict) and data.get("name") else None


def _check_drilled_stack(drills: Drills, stack_path: Path, stack: Any) -> None:
    """Drill evidence names the stack it drilled (`stack`: the --stack path, or `inhouse drill`'s
    built-in demo without one). Evidence of another stack would pass its figures off as this
    plan's: refused, saying how to drill the plan's own stack."""
    name = stack.get("name") if isinstance(stack, dict) else None
    fix = f"run `inhouse drill run all --stack {stack_path} --out DIR` and pass that DIR"
    for run in drills.runs:
        drilled = run.evidence.get("stack")
        if not isinstance(drilled, str) or not drilled:
            continue
        if drilled.startswith("built-in demo"):
            raise SpecError(f"{run.evidence.name}: drilled {drilled}, not the plan's stack; {fix}")
        path = Path(drilled)
        other = _stack_name(path) if path.is_file() else None
        if name and other and other != name:
            raise SpecError(
                f"{run.evidence.name}: drilled {drilled} (stack {other!r}), not the plan's "
                f"stack {name!r}; {fix}"
            )


def _check_benched(
    runs: tuple[BenchRun, ...], plan: dict[str, Any], path: Path
) -> tuple[BenchRun, ...]:
    """A run counts for the workload its label (or model) names: it must have requested that
    workload's model and driven its generator (plan.json `reproduce.bench`), else it measured
    another model or shape and its figures would pass for this plan's."""
    planned = (plan.get("reproduce") or {}).get("bench") or {}
    names = tuple((plan.get("workloads") or {}).keys())
    for run in runs:
        workload = run.workload(names)
        entry = planned.get(workload) if workload else None
        if workload is None or not isinstance(entry, dict):
            continue
        fix = (
            f"bench it with `python scripts/plan_bench_args.py {path} {workload}`'s arguments "
            f"(or relabel the run)"
        )
        model, generator = entry.get("model"), entry.get("workload")
        if model and run.model and run.model != model:
            raise SpecError(
                f"{run.result.name}: a run of workload {workload} that requested model "
                f"{run.model!r}; the plan's {workload} clients send {model!r} "
                f"({path} reproduce.bench.{workload}.model); {fix}"
            )
        driven = run.result.get("workload", "name")
        if generator and isinstance(driven, str) and driven != generator:
            raise SpecError(
                f"{run.result.name}: a run of workload {workload} that drove the {driven!r} "
                f"generator; the plan's {workload} is {generator!r} "
                f"({path} reproduce.bench.{workload}.workload); {fix}"
            )
        _check_shape(run, workload, entry.get("params"), f"{path}", fix)
    return runs


# Generator parameters that set the load, not the shape: a run may drive more than the plan (or
# less: the report then leaves it out, `report.load`). A cold probe sets its own sessions.
LOAD_PARAMS = frozenset({"model", "sessions", "rate_per_s", "session_rate_per_s"})
PROBE_PARAMS = frozenset({"num_apps", "min_turns", "max_turns"})


def _same(a: Any, b: Any) -> bool:
    if str(a) == str(b):
        return True
    try:
        return float(str(a)) == float(str(b))
    except ValueError:
        return False


def _check_shape(run: BenchRun, workload: str, planned: Any, path: str, fix: str) -> None:
    """The run's generator parameters against the plan's (`reproduce.bench.W.params`): the
    same model and generator with another prompt or output shape is another scenario's run."""
    driven = run.result.get("workload", "params")
    if not isinstance(planned, dict) or not isinstance(driven, dict):
        return
    skip = LOAD_PARAMS | (PROBE_PARAMS if run.is_cold_probe else frozenset())
    for key, value in planned.items():
        if key in skip or key not in driven or _same(driven[key], value):
            continue
        raise SpecError(
            f"{run.result.name}: a run of workload {workload} with {key}={driven[key]}; the "
            f"plan's {workload} has {key}={value} ({path} reproduce.bench.{workload}.params), "
            f"another scenario's shape; {fix}"
        )


def load_inputs(
    plan_dir: Path, benches: list[Path], drills: Path | None, render: RenderOutput | None
) -> ReportInputs:
    hint = f"run `inhouse plan REQUIREMENTS --out {plan_dir}` first"
    plan = load_plan(plan_dir)
    try:
        stack = yaml.safe_load((plan_dir / "stack.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"{plan_dir / 'stack.yaml'}: {exc}; {hint}") from None
    compare_path = plan_dir / "compare.json"
    images: dict[str, bytes] = {}
    drill_runs = load_drills(drills, images) if drills else None
    if drill_runs is not None:
        _check_drilled_stack(drill_runs, plan_dir / "stack.yaml", stack)
    return ReportInputs(
        plan=Doc(str(plan_dir / "plan.json"), plan),
        stack=Doc(str(plan_dir / "stack.yaml"), stack),
        benches=_check_benched(
            tuple(r for b in benches for r in load_bench(b)), plan, plan_dir / "plan.json"
        ),
        drills=drill_runs,
        render=render,
        compare=Doc(str(compare_path), load_compare(compare_path))
        if compare_path.exists()
        else None,
        images=images,
    )

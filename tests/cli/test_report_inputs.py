"""The report's I/O edge refuses tampered bench and drill files with an error naming the file
and the field, instead of a traceback or a figure that reads as a met SLO."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inhouse.cli._report_inputs import load_bench, load_drills, load_inputs
from inhouse.cli._report_render import load_render
from inhouse.errors import SpecError

from ..report.report_fixtures import chat_rows, write_bench, write_drills, write_plan


def _bench(
    tmp_path: Path, *, result: dict[str, Any] | None = None, row: dict[str, Any] | None = None
) -> Path:
    """A bench run as `inhouse bench` writes it, then `result` merged into result.json and
    `row` into its first request row."""
    rows = chat_rows(np.random.default_rng(0), 10, cold=2)
    path = write_bench(tmp_path / "chat", "chat", rows, extra=result)
    rows[0].update(row or {})
    (path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_well_formed_run_loads(tmp_path: Path) -> None:
    (run,) = load_bench(_bench(tmp_path))
    assert len(run.requests) == 40 and run.result.get("p95_itl_ms") == 36.25


@pytest.mark.parametrize(
    ("result", "field"),
    [
        ({"p95_itl_ms": -5.0}, "`p95_itl_ms` is -5.0"),
        ({"p95_itl_ms": "36"}, "`p95_itl_ms` is '36'"),
        ({"prefix_cache_hit_rate_server": True}, "`prefix_cache_hit_rate_server` is True"),
        (
            {"server_gauges": {"kv_cache_usage_perc": {"p50": -0.1, "max": 0.5}}},
            "`server_gauges.kv_cache_usage_perc.p50` is -0.1",
        ),
        (
            {"workload": {"name": "agent", "params": {"sessions": "many"}}},
            "`workload.params.sessions` is 'many'",
        ),
        (
            {"workload": {"name": "agent", "params": {}, "duration_s": -40}},
            "`workload.duration_s` is -40",
        ),
        (
            {"run": {"counters_window_unix_s": [20.0, 10.0]}},
            "`run.counters_window_unix_s` is [20.0, 10.0]",
        ),
        ({"run": {"counters_window_unix_s": "today"}}, "`run.counters_window_unix_s` is 'today'"),
    ],
)
def test_a_tampered_result_figure_is_named(
    tmp_path: Path, result: dict[str, Any], field: str
) -> None:
    path = _bench(tmp_path, result=result)
    with pytest.raises(SpecError) as err:
        load_bench(path)
    assert f"{path / 'result.json'}: {field}, not a" in str(err.value)


@pytest.mark.parametrize(
    ("workload", "field"),
    [("agent", "`workload` is 'agent'"), ({"name": "agent", "params": [1]}, "`workload.params`")],
)
def test_a_workload_that_is_not_an_object_is_named(
    tmp_path: Path, workload: Any, field: str
) -> None:
    """`workload` and its `params` are objects as `inhouse bench` writes them; anything else
    was an AttributeError's traceback."""
    path = _bench(tmp_path, result={"workload": workload})
    with pytest.raises(SpecError) as err:
        load_bench(path)
    assert str(err.value).startswith(f"{path / 'result.json'}: {field}")
    assert "not an object as `inhouse bench` writes it" in str(err.value)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_or_infinity_in_result_json_is_refused(tmp_path: Path, constant: str) -> None:
    path = _bench(tmp_path)
    text = (
        (path / "result.json")
        .read_text()
        .replace('"p95_itl_ms": 36.25', f'"p95_itl_ms": {constant}')
    )
    (path / "result.json").write_text(text)
    with pytest.raises(
        SpecError, match=f"is not valid JSON \\({constant} is not a number JSON allows\\)"
    ):
        load_bench(path)


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"ttft_ms": -1.0}, "`ttft_ms` is -1.0"),
        ({"ttft_ms": "abc"}, "`ttft_ms` is 'abc'"),
        ({"ttft_ms": None}, "`ttft_ms` is None"),
        ({"cached_tokens": "x"}, "`cached_tokens` is 'x'"),
        # A failed row's kind, warm or cold, where no cached tokens came back (report.measure).
        ({"ideal_cached_tokens": -1}, "`ideal_cached_tokens` is -1"),
        ({"t_sched_s": "x"}, "`t_sched_s` is 'x'"),
        ({"success": "yes"}, "`success` is 'yes', not true or false"),
        # The latency rows' p95s are computed from the rows (after the warm-up).
        ({"e2el_ms": None}, "`e2el_ms` is None"),
        ({"e2el_ms": -3.0}, "`e2el_ms` is -3.0"),
        ({"output_len": "x"}, "`output_len` is 'x'"),
        ({"itl_ms": "x"}, "`itl_ms` is 'x', not a list of non-negative numbers"),
        ({"itl_ms": [1.0, -2.0]}, "`itl_ms` is [1.0, -2.0], not a list of non-negative numbers"),
    ],
)
def test_a_tampered_request_row_is_named(tmp_path: Path, row: dict[str, Any], field: str) -> None:
    path = _bench(tmp_path, row=row)
    with pytest.raises(SpecError) as err:
        load_bench(path)
    assert str(err.value).startswith(f"{path / 'requests.jsonl'}:1: {field}")


def test_a_failed_request_may_have_no_ttft(tmp_path: Path) -> None:
    counts = {"completed": 38, "failed": 2}  # row 7 failed already; now row 0 too
    (run,) = load_bench(_bench(tmp_path, result=counts, row={"success": False, "ttft_ms": None}))
    assert run.requests[0]["ttft_ms"] is None


def test_a_request_row_that_is_not_an_object_is_named(tmp_path: Path) -> None:
    path = _bench(tmp_path)
    (path / "requests.jsonl").write_text('{"success": true, "ttft_ms": 1, "e2el_ms": 2}\n[1, 2]\n')
    with pytest.raises(SpecError, match=r"requests.jsonl:2: not a request row"):
        load_bench(path)


def test_non_utf8_requests_are_named(tmp_path: Path) -> None:
    path = _bench(tmp_path)
    (path / "requests.jsonl").write_bytes(b"\xff\xfe\n")
    with pytest.raises(SpecError, match=r"cannot read .*requests.jsonl"):
        load_bench(path)


def test_a_run_without_requests_jsonl_is_named(tmp_path: Path) -> None:
    """The TTFT rows and the sessions held come from requests.jsonl: without it the run read as
    0 successful requests, and its rows as not measured."""
    path = _bench(tmp_path)
    (path / "requests.jsonl").unlink()
    with pytest.raises(SpecError) as err:
        load_bench(path)
    assert str(err.value).startswith(
        f"{path / 'requests.jsonl'} not found beside {path / 'result.json'}"
    )


def test_a_truncated_requests_jsonl_is_named(tmp_path: Path) -> None:
    path = _bench(tmp_path)
    rows = (path / "requests.jsonl").read_text().splitlines(keepends=True)
    (path / "requests.jsonl").write_text("".join(rows[:10]))
    with pytest.raises(SpecError) as err:
        load_bench(path)
    assert str(err.value).startswith(
        f"{path / 'requests.jsonl'}: 10 request rows, but {path / 'result.json'} "
        "`num_prompts` is 40"
    )


@pytest.mark.parametrize("key", ["completed", "failed"])
def test_counts_the_rows_contradict_are_refused(tmp_path: Path, key: str) -> None:
    """The bench report quotes result.json's `completed` and `failed`; section 4 reads the
    rows. "Completed 40, failed 0" above a sessions row with a failure: two tables of one run
    that disagree (a result.json edited, or beside another run's rows)."""
    path = _bench(tmp_path)
    rows = [json.loads(x) for x in (path / "requests.jsonl").read_text().splitlines()]
    ok = sum(1 for r in rows if r["success"])
    result = json.loads((path / "result.json").read_text())
    real = result[key]
    assert real == (ok if key == "completed" else len(rows) - ok)
    result[key] = real + 1
    (path / "result.json").write_text(json.dumps(result))
    with pytest.raises(SpecError) as err:
        load_bench(path)
    assert str(err.value).startswith(
        f"{path / 'requests.jsonl'}: {real} {'successful' if key == 'completed' else 'failed'} "
        f"request rows, but {path / 'result.json'} `{key}` is {real + 1}"
    )


@pytest.mark.parametrize("leftover", ["a stale run", "no run"])
def test_a_run_that_did_not_finish_is_refused(tmp_path: Path, leftover: str) -> None:
    """A bench killed mid-run (`kill -9`, the OOM killer, a crash) leaves its records in
    requests.jsonl.partial. Beside an earlier run's whole result.json and requests.jsonl in the
    same --out (rerun there), the earlier run read as this one; alone, as no run at all."""
    path = _bench(tmp_path)
    rows = (path / "requests.jsonl").read_text().splitlines(keepends=True)
    (path / "requests.jsonl.partial").write_text("".join(rows[:7]))
    if leftover == "no run":
        for name in ("result.json", "requests.jsonl"):
            (path / name).unlink()
    for where in (path, tmp_path):  # the run, or a directory of runs holding it
        with pytest.raises(SpecError) as err:
            load_bench(where)
        message = str(err.value)
        assert message.startswith(f"{path / 'requests.jsonl.partial'}: the run in {path} did")
        assert "did not finish" in message and "7 request" in message


def test_a_run_directory_without_result_json_is_named(tmp_path: Path) -> None:
    """In a directory of runs, a run whose result.json is missing was skipped: its workload's
    rows read as never benched."""
    _bench(tmp_path / "bench")
    other = _bench(tmp_path / "bench" / "more")
    (other / "result.json").unlink()
    with pytest.raises(SpecError) as err:
        load_bench(tmp_path / "bench")
    assert str(err.value).startswith(f"{other / 'result.json'} not found, though {other} has")


@pytest.mark.parametrize("name", ["result.json", "requests.jsonl"])
def test_a_fifo_is_refused_not_read(tmp_path: Path, name: str) -> None:
    """A FIFO in place of a file would block the report forever."""
    path = _bench(tmp_path)
    (path / name).unlink()
    os.mkfifo(path / name)
    with pytest.raises(SpecError, match=f"{name} is not a regular file"):
        load_bench(path)


@pytest.mark.parametrize(
    ("evidence", "field"),
    [({"checks": "x"}, "checks"), ({"checks": ["x"]}, "checks"), ({"alerts": ["x"]}, "alerts")],
)
def test_tampered_drill_evidence_is_named(
    tmp_path: Path, evidence: dict[str, Any], field: str
) -> None:
    drills = write_drills(tmp_path / "drills")
    path = drills / "kv-fill" / "evidence.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **evidence}))
    with pytest.raises(SpecError, match=f"evidence.json: `{field}` is not a list of objects"):
        load_drills(drills, {})


@pytest.mark.parametrize(
    ("evidence", "message"),
    [
        (
            {"checks": [{"name": "c", "expected": "e", "observed": "o", "ok": "false"}]},
            "checks[0].ok` is 'false', not true or false",
        ),
        ({"verdict": ["pass"]}, "`verdict` is ['pass'], not 'pass' or 'fail'"),
        (
            {"checks": [{"name": "c", "expected": "e", "observed": "o", "ok": False}]},
            "`verdict` is 'pass' though check 'c' is not ok",
        ),
        ({"checks": []}, "`verdict` is 'pass' with no checks"),
    ],
)
def test_a_verdict_its_checks_do_not_bear_out_is_refused(
    tmp_path: Path, evidence: dict[str, Any], message: str
) -> None:
    """`inhouse drill` passes a drill only when it has checks and every one is ok: a verdict
    the checks contradict would be counted as a drill passed in the summary a customer signs."""
    drills = write_drills(tmp_path / "drills")
    path = drills / "kv-fill" / "evidence.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **evidence}))
    with pytest.raises(SpecError) as err:
        load_drills(drills, {})
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value) and "run the drill again" in str(err.value)


def test_a_non_utf8_drill_report_is_named(tmp_path: Path) -> None:
    drills = write_drills(tmp_path / "drills")
    (drills / "kv-fill" / "report.md").write_bytes(b"\xff")
    with pytest.raises(SpecError, match=r"cannot read .*kv-fill/report.md"):
        load_drills(drills, {})


def test_a_directory_named_like_a_timeline_is_skipped(tmp_path: Path) -> None:
    drills = write_drills(tmp_path / "drills")
    (drills / "kv-fill" / "a.png").mkdir()
    images: dict[str, bytes] = {}
    loaded = load_drills(drills, images)
    assert loaded.run("kv-fill") is not None and loaded.run("kv-fill").timeline_file is None  # type: ignore[union-attr]
    assert list(images) == ["drills/kill-replica-timeline.png"]


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CRM plan, as `inhouse plan` writes it (named crm-copilot)."""
    return write_plan(tmp_path_factory.mktemp("planned") / "plan")


def _plan_dir(tmp_path: Path, planned: Path) -> Path:
    plan = tmp_path / "plan"
    shutil.copytree(planned, plan)
    return plan


def _drilled(drills: Path, stack: str) -> Path:
    for evidence in drills.glob("*/evidence.json"):
        evidence.write_text(json.dumps({**json.loads(evidence.read_text()), "stack": stack}))
    return drills


def test_drills_of_the_built_in_demo_stack_are_refused(tmp_path: Path, planned: Path) -> None:
    """`inhouse drill run all` without --stack drills its demo: its degraded TTFT is not the
    plan's."""
    plan = _plan_dir(tmp_path, planned)
    drills = _drilled(write_drills(tmp_path / "drills"), "built-in demo (crm-copilot-demo)")
    with pytest.raises(SpecError) as err:
        load_inputs(plan, [], drills, None)
    assert str(err.value) == (
        f"{drills / 'bad-signature' / 'evidence.json'}: drilled built-in demo (crm-copilot-demo), "
        f"not the plan's stack; run `inhouse drill run all --stack {plan / 'stack.yaml'} "
        "--out DIR` and pass that DIR"
    )


def test_drills_of_another_stack_file_are_refused(tmp_path: Path, planned: Path) -> None:
    plan = _plan_dir(tmp_path, planned)
    other = tmp_path / "other.yaml"
    other.write_text("version: 1\nname: rag-search\npools: []\n")
    drills = _drilled(write_drills(tmp_path / "drills"), str(other))
    with pytest.raises(
        SpecError, match="stack 'rag-search'\\), not the plan's stack 'crm-copilot'"
    ):
        load_inputs(plan, [], drills, None)


def test_drills_of_the_plans_stack_load(tmp_path: Path, planned: Path) -> None:
    plan = _plan_dir(tmp_path, planned)
    drills = _drilled(write_drills(tmp_path / "drills"), str(plan / "stack.yaml"))
    loaded = load_inputs(plan, [], drills, None)
    assert loaded.drills is not None and len(loaded.drills.runs) == 7


def test_a_run_of_another_model_is_refused(tmp_path: Path, planned: Path) -> None:
    """Labelled chat, but it asked another stack's model: its latencies are not chat's."""
    plan = _plan_dir(tmp_path, planned)  # chat: agent, model chat
    rows = chat_rows(np.random.default_rng(0), 10, cold=2)
    run = write_bench(tmp_path / "chat", "llama-8b-other", rows, label="chat")
    with pytest.raises(SpecError) as err:
        load_inputs(plan, [run], None, None)
    assert str(err.value).startswith(
        f"{run / 'result.json'}: a run of workload chat that requested model 'llama-8b-other'; "
        f"the plan's chat clients send 'chat' ({plan / 'plan.json'} reproduce.bench.chat.model)"
    )


def test_a_run_of_another_generator_is_refused(tmp_path: Path, planned: Path) -> None:
    plan = _plan_dir(tmp_path, planned)  # chat: agent, model chat
    rows = chat_rows(np.random.default_rng(0), 10, cold=2)
    extra = {"workload": {"name": "utility", "params": {}}}
    run = write_bench(tmp_path / "chat", "chat", rows, extra=extra)
    with pytest.raises(
        SpecError, match="drove the 'utility' generator; the plan's chat is 'agent'"
    ):
        load_inputs(plan, [run], None, None)


def test_a_run_of_another_shape_is_refused(tmp_path: Path, planned: Path) -> None:
    """Same model, same generator, another scenario's prompts: a run of another plan's chat
    (or of this one's before a re-plan) with a 2,000-token system prompt against the plan's
    own. Its latencies would stand in section 4 as this plan's."""
    plan = _plan_dir(tmp_path, planned)
    params = json.loads((plan / "plan.json").read_text())["reproduce"]["bench"]["chat"]["params"]
    shape = {k: v for k, v in params.items() if k != "model"}
    assert shape["system_prompt_tokens"] != "2000"
    rows = chat_rows(np.random.default_rng(0), 10, cold=2)
    extra = {"workload": {"name": "agent", "params": {**shape, "system_prompt_tokens": "2000"}}}
    run = write_bench(tmp_path / "chat", "chat", rows, extra=extra)
    with pytest.raises(SpecError) as err:
        load_inputs(plan, [run], None, None)
    assert str(err.value).startswith(
        f"{run / 'result.json'}: a run of workload chat with system_prompt_tokens=2000; the "
        f"plan's chat has system_prompt_tokens={shape['system_prompt_tokens']} "
        f"({plan / 'plan.json'} reproduce.bench.chat.params)"
    )
    probe = {**shape, "sessions": "6", "num_apps": "100000", "min_turns": "1", "max_turns": "1"}
    cold = write_bench(
        tmp_path / "cold",
        "chat",
        rows,
        label="chat-cold",
        extra={"workload": {"name": "agent", "params": probe}},
    )
    heavier = write_bench(
        tmp_path / "heavier",
        "chat",
        rows,
        extra={"workload": {"name": "agent", "params": {**shape, "sessions": "150"}}},
    )
    assert len(load_inputs(plan, [cold, heavier], None, None).benches) == 2


def test_runs_of_the_planned_model_and_generator_load(tmp_path: Path, planned: Path) -> None:
    plan = _plan_dir(tmp_path, planned)  # chat: agent, model chat
    rows = chat_rows(np.random.default_rng(0), 10, cold=2)
    runs = [
        write_bench(tmp_path / "chat", "chat", rows),
        write_bench(tmp_path / "cold", "chat", rows, label="chat-cold"),
        write_bench(tmp_path / "other", "embedder", rows, label="embed"),  # no plan workload
    ]
    assert len(load_inputs(plan, runs, None, None).benches) == 3


@pytest.fixture(scope="module")
def compared(planned: Path) -> dict[str, Any]:
    """A real `inhouse plan --compare` result (the small plan with a LoRA utility workload:
    a layout and an engine alternative)."""
    from inhouse.plan import build_report, make_plan
    from inhouse.plan.compare import compare

    from ..plan.plan_helpers import parse
    from ..plan.test_compare import _with_utility

    req = parse(_with_utility())
    chosen = build_report(make_plan(req, verify=False), sensitivity=False)
    return compare(req, chosen, verify=False)


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    *parents, last = path
    for part in parents:
        data = data[part]
    if value is KeyError:
        del data[last]
    else:
        data[last] = value


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("chosen", "usd_per_hour"), "cheap", "chosen.usd_per_hour: expected a non-negative"),
        (("chosen", "usd_per_hour"), KeyError, "chosen.usd_per_hour: expected a non-negative"),
        (("alternatives",), {}, "alternatives: expected a list"),
        (("alternatives", 0, "label"), KeyError, "alternatives[0].label: expected a non-empty"),
        (("alternatives", 0, "blast_radius", 0, "replicas"), 0, "blast_radius[0].replicas"),
        (("alternatives", 0, "blast_radius", 0, "workloads"), "chat", "blast_radius[0].workloads"),
        (("chosen", "degraded"), [{"pool": "chat"}], "chosen.degraded[0].pass: expected true"),
        (("chosen", "gpus"), -1, "chosen.gpus: expected a non-negative integer"),
        (("chosen", "meets_slo_at_1x"), "yes", "chosen.meets_slo_at_1x: expected true or false"),
    ],
)
def test_a_tampered_compare_json_is_named(
    tmp_path: Path,
    planned: Path,
    compared: dict[str, Any],
    path: tuple[Any, ...],
    value: Any,
    named: str,
) -> None:
    # compare.json was read unchecked: a hand-edited one ended the report in a KeyError or
    # TypeError traceback, or printed "1/0 of chat" as a blast radius.
    plan = _plan_dir(tmp_path, planned)
    data = json.loads(json.dumps(compared))
    _set(data, path, value)
    (plan / "compare.json").write_text(json.dumps(data))
    with pytest.raises(SpecError) as err:
        load_inputs(plan, [], None, None)
    message = str(err.value)
    assert message.startswith(f"{plan / 'compare.json'}: ") and named in message, message
    assert "--compare` again" in message


def test_a_real_compare_json_loads_and_lays_out(
    tmp_path: Path, planned: Path, compared: dict[str, Any]
) -> None:
    from inhouse.report.document import build_document

    plan = _plan_dir(tmp_path, planned)
    (plan / "compare.json").write_text(json.dumps(compared))
    inputs = load_inputs(plan, [], None, None)
    assert inputs.compare is not None
    assert "The trade:" in build_document(inputs).markdown


def _render_dir(tmp_path: Path, planned: Path) -> Path:
    from inhouse.render import render_stack
    from inhouse.spec.load import load_stack

    out = tmp_path / "deploy"
    for relative, text in render_stack(load_stack(planned / "stack.yaml")).files.items():
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        (out / relative).write_text(text)
    return out


@pytest.mark.parametrize(
    ("file", "text", "named"),
    [
        ("prometheus/rules.yaml", "groups: [\n", "not valid YAML"),
        ("prometheus/rules.yaml", "groups: 5\n", "`groups` is not a list of objects"),
        ("prometheus/rules.yaml", "- 1\n", "not a Prometheus rules file (an object with `groups`)"),
        ("prometheus/rules.yaml", "groups: [{rules: [1]}]\n", "`groups[0].rules`"),
        ("prometheus/rules.yaml", "groups: [{rules: [{alert: A, labels: x}]}]\n", "labels"),
        ("grafana/slo.json", '{"panels": [', "not valid JSON"),
        ("grafana/slo.json", '{"panels": 3}', "`panels` is not a list of objects"),
    ],
)
def test_a_malformed_render_is_named(
    tmp_path: Path, planned: Path, file: str, text: str, named: str
) -> None:
    """`--render DIR` with a hand-edited or cut rules file was a yaml/TypeError/AttributeError
    traceback; a cut dashboard went missing from section 6 without a word."""
    render = _render_dir(tmp_path, planned)
    (render / file).write_text(text)
    with pytest.raises(SpecError) as err:
        load_render(render)
    message = str(err.value)
    assert message.startswith(f"{render / file}: ") and named in message, message
    assert "run `inhouse render STACK --out DIR` again" in message


def test_a_render_without_rules_is_named(tmp_path: Path, planned: Path) -> None:
    """A directory that is not a render read as one with no alerts: every alarm fell back to
    the requirements' and section 6 listed nothing."""
    render = _render_dir(tmp_path, planned)
    (render / "prometheus" / "rules.yaml").unlink()
    with pytest.raises(SpecError, match=r"no prometheus/rules.yaml in it"):
        load_render(render)
    assert load_render(_render_dir(tmp_path / "whole", planned)).files


def test_two_evidence_files_of_one_drill_are_refused(tmp_path: Path) -> None:
    """A drill copied aside (`kill-replica.old/`, a rerun kept beside it): the report quoted
    whichever sorted first, a stale verdict as likely as the current one."""
    drills = write_drills(tmp_path / "drills", failing="kill-replica")
    shutil.copytree(drills / "kill-replica", drills / "kill-replica.old")
    evidence = drills / "kill-replica.old" / "evidence.json"
    passed = {**json.loads(evidence.read_text()), "verdict": "pass"}
    passed["checks"] = [{**c, "ok": True} for c in passed["checks"]]
    evidence.write_text(json.dumps(passed))
    with pytest.raises(SpecError) as err:
        load_drills(drills, {})
    assert str(err.value).startswith(
        f"--drills {drills}: two evidence files for drill kill-replica "
        f"({drills / 'kill-replica' / 'evidence.json'}, {evidence})"
    )


def test_evidence_an_earlier_drill_run_left_is_refused(tmp_path: Path) -> None:
    """`drill run kill-replica --out drills/` over last month's `drill all`: the other six
    drills' old evidence stayed beside this run's, and the report quoted their passes as this
    run's. A drill whose evidence the run's summary.json does not list is refused, naming it,
    and so is a run that did not finish (its summary says so)."""
    drills = write_drills(tmp_path / "drills")
    summary = json.loads((drills / "summary.json").read_text())
    rerun = {**summary, "drills": summary["drills"][:1], "planned": ["kill-replica"]}
    (drills / "summary.json").write_text(json.dumps({**rerun, "finished": True}))
    with pytest.raises(SpecError, match=r"bad-signature, .*summary\.json does not list"):
        load_drills(drills, {})
    for name in [d["drill"] for d in summary["drills"][1:]]:
        shutil.rmtree(drills / name)
    assert [r.name for r in load_drills(drills, {}).runs] == ["kill-replica"]
    (drills / "summary.json").write_text(json.dumps({**rerun, "finished": False}))
    with pytest.raises(SpecError, match="did not finish"):
        load_drills(drills, {})

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from inhouse.metric_names import (
    DCGM_METRICS,
    GATEWAY_METRICS,
    VLLM_METRICS,
    exposition_series_names,
    metric_names_in_promql,
    unknown_names,
)
from inhouse.render import Rendered
from inhouse.render.grafana import dashboard_exprs

CAPTURE = Path(__file__).resolve().parent / "data" / "vllm_metrics_0.32.txt"
NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def test_every_vllm_name_we_read_is_in_the_real_capture() -> None:
    exposed = exposition_series_names(CAPTURE.read_text())
    assert len(exposed) > 100
    assert sorted(set(VLLM_METRICS) - exposed) == []


def test_gateway_contract_is_well_formed() -> None:
    names = [m.name for m in GATEWAY_METRICS]
    assert len(set(names)) == len(names)
    for metric in GATEWAY_METRICS:
        assert NAME.match(metric.name) and metric.name.startswith("inhouse_gateway_")
        assert metric.name.endswith("_total") == (metric.kind == "counter"), metric.name
        assert bool(metric.buckets) == (metric.kind == "histogram"), metric.name
        assert list(metric.buckets) == sorted(metric.buckets)
        assert metric.help
    requests = next(m for m in GATEWAY_METRICS if m.name == "inhouse_gateway_requests_total")
    assert requests.labels == ("tenant", "model", "pool", "replica", "code")


def test_dcgm_names_are_unique() -> None:
    names = [f.name for f in DCGM_METRICS]
    assert len(set(names)) == len(names)
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in names and "DCGM_FI_DEV_XID_ERRORS" in names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            "histogram_quantile(0.95, sum by (le, model_name) "
            '(rate(vllm:time_to_first_token_seconds_bucket{model_name="x"}[5m])))',
            {"vllm:time_to_first_token_seconds_bucket"},
        ),
        ('(count(up{job="a"} == 1) or vector(0)) < 2', {"up"}),
        (
            "rate(DCGM_FI_DEV_POWER_VIOLATION[$__rate_interval]) / 1e6",
            {"DCGM_FI_DEV_POWER_VIOLATION"},
        ),
        ('a:b:c{x="y"} > 0.0144\nand\nd_total offset 5m', {"a:b:c", "d_total"}),
        ("sum(x) by (pod) * $usd / 1e6 unless on (pod) y", {"x", "y"}),
    ],
)
def test_names_in_promql(expr: str, names: set[str]) -> None:
    assert metric_names_in_promql(expr) == names


def test_unknown_names_are_reported_with_their_expression() -> None:
    assert unknown_names(["rate(vllm:num_preemptions[5m])"]) == {
        "vllm:num_preemptions": ["rate(vllm:num_preemptions[5m])"]
    }


@pytest.mark.parametrize("example", ["crm-copilot", "code-assistant"])
def test_rules_and_dashboards_read_only_known_names(
    rendered: dict[str, Rendered], example: str
) -> None:
    """Every name is the gateway's, vLLM's (as captured), DCGM's, `up`, or a recording rule."""
    files = rendered[example].files
    groups = yaml.safe_load(files["prometheus/rules.yaml"])["groups"]
    rules = [r for g in groups for r in g["rules"]]
    recorded = {r["record"] for r in rules if "record" in r}
    exprs = [r["expr"] for r in rules]
    for path, text in files.items():
        if path.startswith("grafana/") and path.endswith(".json"):
            exprs += dashboard_exprs(json.loads(text))
    docs = yaml.safe_load_all(files.get("k8s/autoscaling.yaml", ""))
    exprs += [t["metadata"]["query"] for d in docs if d for t in d["spec"]["triggers"]]
    assert unknown_names(exprs, recorded) == {}
    used = set().union(*(metric_names_in_promql(e) for e in exprs))
    exposed = exposition_series_names(CAPTURE.read_text())
    assert {n for n in used if n.startswith("vllm:")} <= exposed


def _gateway_replica_labels(pool: str, replicas: int) -> set[str]:
    """The `replica` label values the gateway itself gives a pool's replicas (its `Replica`)."""
    from inhouse.gateway.replicas import Replica

    return {Replica(pool, i, f"http://{pool}-{i}:8000", 1, 1.0).label for i in range(replicas)}


def test_rendered_gateway_series_carry_the_replica_label_the_gateway_emits() -> None:
    """The promtool cases' synthetic gateway series (burn rate per pool and per workload, the
    request-rate trigger) label replicas as the gateway does, not with a retired spelling."""
    pool = {"name": "chat", "model": "Qwen2.5-7B", "replicas": 2}
    trigger = {"change": "traffic_up", "change_text": "traffic up", "signal": "request_rate",
               "pool": "chat", "model": "chat-model", "workloads": ["w"], "threshold": 5.0,
               "planned": 3.0}  # fmt: skip
    stacks = [
        {"name": "s", "pools": [pool]},
        {"name": "s", "pools": [{**pool, "served_model_name": "chat-model"}],
         "workloads": [{"name": "w", "model": "chat-model"}], "triggers": [trigger]},
    ]  # fmt: skip
    from inhouse.render import render_stack
    from inhouse.spec.stack import parse_stack

    expected = _gateway_replica_labels("chat", 2)
    seen: set[str] = set()
    for spec in stacks:
        tests = yaml.safe_load(render_stack(parse_stack(spec)).files["prometheus/rules_test.yaml"])
        for test in tests["tests"]:
            for series in test["input_series"]:
                if series["series"].startswith("inhouse_gateway_"):
                    seen.update(re.findall(r'replica="([^"]*)"', series["series"]))
    assert seen, "no gateway series with a replica label: the test lost its subject"
    assert seen <= expected, (seen, expected)

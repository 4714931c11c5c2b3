from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from inhouse.drill.timescale import (
    format_duration_ms,
    parse_duration_ms,
    scale_expr,
    scale_rules,
)
from inhouse.errors import SpecError
from inhouse.launch.demo import demo_stack
from inhouse.render.prometheus import render_prometheus


def test_durations_parse_and_format() -> None:
    assert parse_duration_ms("1h30m") == 5_400_000
    assert parse_duration_ms("500ms") == 500
    assert format_duration_ms(5_400_000) == "1h30m"
    assert format_duration_ms(30_000) == "30s"
    assert format_duration_ms(1_500) == "1s500ms"
    with pytest.raises(SpecError, match="not a Prometheus duration"):
        parse_duration_ms("5 minutes")


def test_ranges_and_subqueries_scale_thresholds_do_not() -> None:
    expr = 'rate(x[5m]) > 0.95 and max_over_time(y[30m:1m]) > 300 and z{le="0.5"} offset 1h'
    scaled = scale_expr(expr, 0.1)
    assert scaled == (
        'rate(x[30s]) > 0.95 and max_over_time(y[3m:6s]) > 300 and z{le="0.5"} offset 1h'
    )


def test_short_windows_keep_two_scrapes() -> None:
    assert scale_expr("rate(x[30s])", 0.01) == "rate(x[5s])"


def test_rules_scaled_by_one_factor_and_unchanged_at_one() -> None:
    rules = render_prometheus(demo_stack(2), "ns", "runbook.md")["prometheus/rules.yaml"]
    assert scale_rules(rules, 1.0) == rules
    before = yaml.safe_load(rules)
    after = yaml.safe_load(scale_rules(rules, 0.1))
    pairs = [
        (a, b)
        for ga, gb in zip(before["groups"], after["groups"], strict=True)
        for a, b in zip(ga["rules"], gb["rules"], strict=True)
    ]
    kv = next(b for a, b in pairs if a.get("alert") == "InhouseKVCacheFull")
    assert kv["for"] == "6s" and kv["expr"].endswith("> 0.95")
    down = next(b for a, b in pairs if a.get("alert") == "InhouseEngineReplicaDown")
    assert down["for"] == "3s"
    for a, b in pairs:  # labels, annotations and names untouched
        assert a.get("alert") == b.get("alert") and a.get("labels") == b.get("labels")
        assert a.get("annotations") == b.get("annotations")


@pytest.mark.parametrize("factor", [0.0, -1.0, 2.0])
def test_factor_outside_0_1_is_refused(factor: float) -> None:
    with pytest.raises(SpecError, match="time-scale"):
        scale_rules("groups: []", factor)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_scaled_rules_pass_promtool(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rules = render_prometheus(demo_stack(2), "ns", "runbook.md")["prometheus/rules.yaml"]
    path = tmp_path / "rules.yaml"
    path.write_text(scale_rules(rules, 0.1))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_keep_firing_for_is_a_hold_and_scales_like_for() -> None:
    # left at 10m, an alert of a 30 s drill would stay firing ten minutes after its fault
    rules = (
        "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: rate(x[5m]) > 0.5\n"
        "    for: 2m\n    keep_firing_for: 10m\n"
    )
    (rule,) = yaml.safe_load(scale_rules(rules, 0.1))["groups"][0]["rules"]
    assert rule == {"alert": "A", "expr": "rate(x[30s]) > 0.5", "for": "12s",
                    "keep_firing_for": "1m"}  # fmt: skip


def test_strings_that_look_like_windows_are_left_alone() -> None:
    # a label value or a label_replace argument is data, not a window
    expr = (
        'label_replace(rate(x{w="[5m]", q=\'a\\\'[1h]\'}[5m]), "win", "[10m]", "", "")'
        " > 0.5 and y{r=`[2h]`}[30m:1m]"
    )
    assert scale_expr(expr, 0.1) == (
        'label_replace(rate(x{w="[5m]", q=\'a\\\'[1h]\'}[30s]), "win", "[10m]", "", "")'
        " > 0.5 and y{r=`[2h]`}[3m:6s]"
    )

"""InhouseEngineReplicasMissing against how render deploys engines: a rolling update replaces
one replica at a time (maxSurge 0), and the new pod is gone from the scrape for as long as the
old one takes to stop (terminationGracePeriodSeconds) and the new one to load its weights (up
to the startupProbe's window). That must not page; a replica missing for longer must."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from tests.render.promtool_scenarios import needs_promtool, run_scenarios, scenario, selector

from inhouse.render import Rendered, render_stack
from inhouse.render.alerts import Alert
from inhouse.render.prometheus import stack_rules
from inhouse.spec.stack import StackSpec, parse_stack

NAMESPACE = "demo"
STEP_S = 30


def _stack(nodes: int) -> StackSpec:
    return parse_stack(
        {
            "name": NAMESPACE,
            "nodes": [{"gpu": "h100_sxm", "gpus_per_node": 8, "count": nodes}],
            "pools": [{"name": "chat", "model": "Qwen2.5-7B", "replicas": 2}],
        }
    )


def grace_and_window_s(rendered: Rendered) -> tuple[int, int]:
    """From the rendered StatefulSet or Deployment itself: the old pod's
    terminationGracePeriodSeconds and the new pod's startupProbe window (periodSeconds x
    failureThreshold)."""
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(rendered.files["k8s/engine-chat.yaml"]))
    engine = next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))
    spec = engine["spec"]["template"]["spec"]
    probe = spec["containers"][0]["startupProbe"]
    return int(spec["terminationGracePeriodSeconds"]), probe["periodSeconds"] * probe[
        "failureThreshold"
    ]


def _missing_alert(stack: StackSpec) -> Alert:
    _, alerts = stack_rules(stack, NAMESPACE)
    return next(a for a in alerts if a.name == "InhouseEngineReplicasMissing")


def _one_replica_gone(down_s: int) -> tuple[list[tuple[str, str]], str]:
    """Replica r1 scrapes 0 for `down_s` from t=60s, then 1 again; r0 stays up. Returns the
    series and the time of r1's last failed scrape."""
    steps = down_s // STEP_S
    up = {"namespace": NAMESPACE, "job": "chat-engine"}
    r0 = selector("up", {**up, "instance": "10.0.0.1:8000", "pod": "chat-0"})
    r1 = selector("up", {**up, "instance": "10.0.0.2:8000", "pod": "chat-1"})
    values = " ".join(["1", "1"] + ["0"] * steps + ["1"] * 40)
    last_down = 60 + STEP_S * (steps - 1)
    return [(r0, f"1x{steps + 42}"), (r1, values)], f"{last_down}s"


@needs_promtool
def test_a_rollout_within_the_startup_allowance_does_not_page(tmp_path: Path) -> None:
    for nodes in (1, 2):  # the static layout (a StatefulSet) and the scaled one
        stack = _stack(nodes)
        rendered = render_stack(stack)
        allowance = sum(grace_and_window_s(rendered))
        alert = _missing_alert(stack)
        rollout, rollout_end = _one_replica_gone(allowance)
        lost, lost_end = _one_replica_gone(allowance + 600)
        tests = [
            scenario("rolling update", "30s", rollout, [(rollout_end, alert, None)]),
            scenario("replica lost", "30s", lost, [(lost_end, alert, {})]),
        ]
        verdict = run_scenarios(tmp_path, rendered, tests)
        assert verdict == "", f"{nodes} node(s), allowance {allowance} s:\n{verdict}"


def test_the_runbook_says_how_long_a_replica_may_be_missing() -> None:
    stack = _stack(1)
    grace_s, window_s = grace_and_window_s(render_stack(stack))
    meaning = _missing_alert(stack).runbook.meaning
    assert f"terminationGracePeriodSeconds {grace_s} s" in meaning
    assert f"startupProbe window {window_s} s" in meaning

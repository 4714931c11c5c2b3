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


# A rollout (one replica loading for minutes), a crash that stays, two replicas down at once:
# what pages and what does not, over every page-severity rule render writes.
ROLLOUT_S = 600


def _pages(stack: StackSpec) -> list[Alert]:
    """One Alert per page-severity rule name of the stack (the name is what promtool checks)."""
    _, alerts = stack_rules(stack, NAMESPACE)
    by_name = {a.name: a for a in alerts if a.severity == "page"}
    return list(by_name.values())


def _replicas_up(downs: dict[str, str], samples: int) -> list[tuple[str, str]]:
    """`up` of the gateway (always 1) and of chat-0 and chat-1, each `1x{samples}` unless
    `downs` gives its values; 30 s apart."""
    gateway = {"namespace": NAMESPACE, "job": "gateway", "pod": "gateway-0"}
    series = [(selector("up", {**gateway, "instance": "10.0.1.1:8080"}), f"1x{samples}")]
    for i in range(2):
        pod = f"chat-{i}"
        labels = {"namespace": NAMESPACE, "job": "chat-engine", "instance": f"10.0.0.{i + 1}:8000"}
        series.append((selector("up", {**labels, "pod": pod}), downs.get(pod, f"1x{samples}")))
    return series


def _no_page_at(times_s: list[int], pages: list[Alert]) -> list[tuple[str, Alert, None]]:
    return [(f"{t}s", alert, None) for t in times_s for alert in pages]


@needs_promtool
def test_a_rollout_pages_nothing_while_a_replica_loads(tmp_path: Path) -> None:
    """A StatefulSet rollout takes one replica out of the scrape for its whole model load
    (its own Service answers nothing meanwhile): up == 0 for 10 minutes, then back. No page,
    at any point; the replica-down alert still says so, as a ticket."""
    for nodes in (1, 2):
        stack = _stack(nodes)
        rendered = render_stack(stack)
        steps = ROLLOUT_S // STEP_S
        downs = {"chat-1": f"1 1 0x{steps - 1} 1x30"}
        series = _replicas_up(downs, steps + 32)
        times = [90, 150, 300, 450, 60 + ROLLOUT_S - STEP_S, 60 + ROLLOUT_S + 120]
        _, alerts = stack_rules(stack, NAMESPACE)
        down = next(a for a in alerts if a.name == "InhouseEngineReplicaDown")
        keeps = {"namespace": NAMESPACE, "job": "chat-engine", "instance": "10.0.0.2:8000",
                 "pod": "chat-1"}  # fmt: skip
        checks = [*_no_page_at(times, _pages(stack)), ("150s", down, keeps)]
        verdict = run_scenarios(tmp_path, rendered, [scenario("rollout", "30s", series, checks)])
        assert verdict == "", f"{nodes} node(s):\n{verdict}"
        assert down.severity == "ticket"


@needs_promtool
def test_a_replica_down_past_the_rollout_allowance_pages(tmp_path: Path) -> None:
    stack = _stack(1)
    rendered = render_stack(stack)
    allowance_s = sum(grace_and_window_s(rendered))
    steps = (allowance_s + 600) // STEP_S
    series = _replicas_up({"chat-1": f"1 1 0x{steps}"}, steps + 3)
    missing = _missing_alert(stack)
    quiet = _no_page_at([300], _pages(stack))
    fired = (f"{60 + STEP_S * steps}s", missing, {})
    verdict = run_scenarios(
        tmp_path, rendered, [scenario("crash, never back", "30s", series, [*quiet, fired])]
    )
    assert verdict == "", verdict


@needs_promtool
def test_two_replicas_of_a_pool_down_at_once_page_within_two_minutes(tmp_path: Path) -> None:
    """More replicas down than a rollout ever takes (one per pool, as the PodDisruptionBudget
    allows too): the pool is below its degraded mode, and that pages at once, not after the
    rollout allowance."""
    for nodes in (1, 2):
        stack = _stack(nodes)
        rendered = render_stack(stack)
        both = {"chat-0": "1 1 0x10", "chat-1": "1 1 0x10"}
        series = _replicas_up(both, 13)
        _, alerts = stack_rules(stack, NAMESPACE)
        below = next(a for a in alerts if a.name == "InhouseEnginePoolBelowDegraded")
        assert below.severity == "page"
        checks = [("60s", below, None), ("180s", below, {})]
        verdict = run_scenarios(tmp_path, rendered, [scenario("two down", "30s", series, checks)])
        assert verdict == "", f"{nodes} node(s):\n{verdict}"


# A replica that crashes after it got Ready and comes back each time: InhouseEngineReplicaDown
# (a ticket) and InhouseEngineReplicasMissing reset with each recovery; its process starts page.
FLAP_STEP_S = 60


def _flapping(stack: StackSpec) -> Alert:
    _, alerts = stack_rules(stack, NAMESPACE)
    return next(a for a in alerts if a.name == "InhouseEngineReplicaFlapping")


def _restarts(restarts: dict[str, list[int]], samples: int, load: int = 3) -> list[tuple[str, str]]:
    """`up` and `process_start_time_seconds` of chat-0 and chat-1, one sample a minute, written
    out here: a pod restarting at minute r is out of the scrape (`up` 0, no start time) for `load`
    minutes, then its new process reports the minute it went down as its start; the gateway up."""
    gateway = {"namespace": NAMESPACE, "job": "gateway", "pod": "gateway-0"}
    series = [(selector("up", {**gateway, "instance": "10.0.1.1:8080"}), f"1x{samples}")]
    for i in range(2):
        pod = f"chat-{i}"
        labels = {"namespace": NAMESPACE, "job": "chat-engine", "instance": f"10.0.0.{i + 1}:8000",
                  "pod": pod}  # fmt: skip
        ups, starts = [], []
        start = 1_700_000_000
        for minute in range(samples):
            down = [r for r in restarts.get(pod, []) if r <= minute < r + load]
            if down:
                start = 1_700_000_000 + 60 * down[0]
            ups.append("0" if down else "1")
            starts.append("_" if down else str(start))
        series.append((selector("up", labels), " ".join(ups)))
        series.append((selector("process_start_time_seconds", labels), " ".join(starts)))
    return series


@needs_promtool
def test_a_replica_crashing_three_times_in_an_hour_pages(tmp_path: Path) -> None:
    """Three crashes of chat-1, 15 minutes apart, each back within 3 minutes: nothing else
    pages (each recovery resets the replica-down and replicas-missing timers), the flapping
    alert pages once the third new process is scraped, and not after the second."""
    crashes = [10, 25, 40]
    for nodes in (1, 2):
        stack = _stack(nodes)
        rendered = render_stack(stack)
        flapping = _flapping(stack)
        assert flapping.severity == "page"
        down = next(
            a for a in stack_rules(stack, NAMESPACE)[1] if a.name == "InhouseEngineReplicaDown"
        )
        assert flapping.name in down.runbook.meaning  # the ticket's reader learns what pages
        others = [a for a in _pages(stack) if a.name != flapping.name]
        keeps = {"namespace": NAMESPACE, "job": "chat-engine", "instance": "10.0.0.2:8000",
                 "pod": "chat-1"}  # fmt: skip
        after_second, after_third = crashes[1] + 5, crashes[2] + 5
        checks = [
            *_no_page_at([60 * (c + 2) for c in crashes] + [60 * after_third], others),
            (f"{after_second}m", flapping, None),
            (f"{after_third}m", flapping, keeps),
            (f"{crashes[0] + 62}m", flapping, None),  # the first crash left the hour
        ]
        series = _restarts({"chat-1": crashes}, crashes[0] + 64)
        verdict = run_scenarios(tmp_path, rendered, [scenario("crashes", "1m", series, checks)])
        assert verdict == "", f"{nodes} node(s):\n{verdict}"


@needs_promtool
def test_a_rollout_or_one_crash_does_not_page_as_flapping(tmp_path: Path) -> None:
    """A rollout restarts each replica once (one after the other); one crash restarts one; a
    rollout and its rollback, or the kill-replica drill (SIGKILL, then SIGTERM), twice."""
    histories = {
        "rollout": {"chat-0": [10], "chat-1": [20]},
        "one crash": {"chat-1": [10]},
        "rollout and rollback": {"chat-0": [10, 30], "chat-1": [20, 40]},
    }
    for nodes in (1, 2):
        stack = _stack(nodes)
        rendered = render_stack(stack)
        flapping = _flapping(stack)
        tests = [
            scenario(name, "1m", _restarts(restarts, 61),
                     [(f"{m}m", flapping, None) for m in (15, 25, 35, 45, 60)])
            for name, restarts in histories.items()
        ]  # fmt: skip
        verdict = run_scenarios(tmp_path, rendered, tests)
        assert verdict == "", f"{nodes} node(s):\n{verdict}"

"""kill-replica's "rejoins only once healthy" (review, stop 25): judged from the moment the
gateway took the replica out (its own health gauge) to the moment the replica itself turned
/health 200. Routing there always fails it; the gateway taking the replica back before a late
drill probe looked does not, nor does routing to a replica that just exited before the gateway
noticed (within its health window, which the drain check bounds). The drain's window is one
probe while the replica still runs (it answers /health 503, and the gateway believes it), the
dead replica's window when it exited first."""

from __future__ import annotations

from types import SimpleNamespace

from inhouse.drill.drills.kill_replica import _check_drain, _check_rejoin, drain_window_s
from inhouse.drill.evidence import DrillResult
from inhouse.drill.watch import RouteWatch
from inhouse.spec.gateway import HealthSpec

REJOIN = "rejoins only once healthy (after the drain)"
DRAIN = "drain: no new requests to the draining replica"
OUT = "drain: the gateway takes the draining replica out"
# SIGTERM, the process gone (a quick drain), /health 200 again by the replica's own clock.
TERM, GONE, READY = 100.0, 100.5, 106.0
HEALTH = HealthSpec()  # probes 1 s apart, 2 s timeout, out after 2 failures


def _watch(routed: list[float], left: float | None, back: float) -> RouteWatch:
    """The gateway's metrics scraped each 0.25 s: a routing decision to replica 1 counted by
    the first sample at or after each time in `routed`; the replica healthy in the gateway
    until `left` (None: never taken out) and again from `back`."""
    watch = RouteWatch("http://gateway/metrics", "chat")
    for step in range(60):
        t = 99.0 + 0.25 * step
        count = 7.0 + sum(1.0 for r in routed if r <= t)
        healthy = 1.0 if left is None or t < left or t >= back else 0.0
        watch.samples.append((t, {"0": 50.0 + step, "1": count}, {"0": 1.0, "1": healthy}))
    return watch


def _checks(watch: RouteWatch, gone: float = GONE) -> dict[str, tuple[bool, str]]:
    result = DrillResult("kill-replica", "now", "test")
    ctx = SimpleNamespace(result=result)
    window = drain_window_s(HEALTH, gone - TERM)
    _check_drain(ctx, [], watch, "1", TERM, gone, 0, window, 2.0)  # type: ignore[arg-type]
    _check_rejoin(ctx, watch, "1", (TERM, gone), READY, "after the drain")  # type: ignore[arg-type]
    return {c.name: (c.ok, c.observed) for c in result.checks}


def test_the_gateway_taking_the_replica_back_once_it_is_ready_passes() -> None:
    # What failed under load: the gateway saw the 200 at +0.25 s and routed at +0.5 s, while
    # the drill's own probe, late, saw it only at +1.2 s.
    checks = _checks(_watch([READY + 0.5], left=TERM + 2.0, back=READY + 0.25))
    ok, observed = checks[REJOIN]
    assert ok, observed
    assert "0 routed before ready" in observed and "+0.2 s after ready" in observed


def test_routing_to_the_exited_replica_before_the_gateway_took_it_out_is_the_drains_business():
    # Also failed under load: the drain ended in 0.5 s, the gateway (2 failed probes, 1 s
    # apart) took the replica out 2 s after SIGTERM and routed to it once in between.
    checks = _checks(_watch([TERM + 1.2, READY + 0.5], left=TERM + 2.0, back=READY + 0.25))
    assert checks[REJOIN][0], checks[REJOIN]
    ok, observed = checks[DRAIN]
    assert ok and "last one 1.2 s after" in observed, observed


def test_routing_to_the_exited_replica_after_the_health_window_fails_the_drain() -> None:
    checks = _checks(_watch([TERM + 5.5, READY + 0.5], left=TERM + 6.0, back=READY + 0.25))
    ok, observed = checks[DRAIN]
    assert not ok and "last one 5.5 s after" in observed, observed


def test_routing_to_the_replica_before_it_is_ready_fails() -> None:
    # A gateway that takes a loading replica for healthy: routed 1 s before /health was 200.
    checks = _checks(_watch([READY - 1.0], left=TERM + 2.0, back=READY - 1.25))
    ok, observed = checks[REJOIN]
    assert not ok and "1 routed before ready" in observed, observed


def test_routing_the_sample_just_before_ready_fails() -> None:
    # A decision counted by a scrape that came back before the replica was ready was made
    # before it: no slack.
    checks = _checks(_watch([READY - 0.25], left=TERM + 2.0, back=READY + 0.25))
    ok, observed = checks[REJOIN]
    assert not ok and "1 routed before ready" in observed, observed


def test_a_gateway_that_never_takes_the_replica_out_fails() -> None:
    checks = _checks(_watch([TERM + 1.0, GONE + 3.0, READY + 0.5], left=None, back=READY))
    ok, observed = checks[REJOIN]
    assert not ok and "never took it out" in observed, observed
    assert not checks[DRAIN][0], checks[DRAIN]


def test_the_drain_window_is_one_probe_while_the_replica_runs_else_the_dead_window() -> None:
    one_probe = "one probe, which it answers 503"
    assert drain_window_s(HEALTH, None) == (3.0, one_probe)  # still draining at the end
    assert drain_window_s(HEALTH, 3.0) == (3.0, one_probe)
    assert drain_window_s(HEALTH, 0.5) == (
        4.0,
        "the dead replica's window: it exited 0.5 s after SIGTERM",
    )


def test_a_long_drain_is_judged_by_one_probe() -> None:
    # The replica drains for 5 s; the gateway routed to it last 0.75 s after SIGTERM and
    # believed its first 503 (1 s).
    checks = _checks(_watch([TERM + 0.75, READY + 0.5], left=TERM + 1.0, back=READY), TERM + 5)
    assert checks[DRAIN] == (True, "last one 0.8 s after")
    assert checks[OUT] == (True, "1.0 s after SIGTERM")


def test_a_gateway_that_counts_the_503_like_a_timeout_late_fails_a_long_drain() -> None:
    # Out only 4 s after SIGTERM, routing there until then: within the dead replica's window
    # (what a quick drain is allowed) but not within one probe (3 s, 0.5 s of sampling slack).
    late = _watch([TERM + 3.75, READY + 0.5], left=TERM + 4.0, back=READY)
    checks = _checks(late, TERM + 5)
    assert checks[DRAIN] == (False, "last one 3.8 s after")
    assert checks[OUT] == (False, "4.0 s after SIGTERM")
    quick = _checks(late)
    assert quick[DRAIN] == (True, "last one 3.8 s after")
    assert quick[OUT] == (True, "4.0 s after SIGTERM")


def test_a_kill_the_watch_did_not_see_fails_the_routing_check() -> None:
    # The gateway's /metrics never showed replica 1 (a renamed label, a wrong URL): nothing was
    # seen routed there because nothing was seen; the check passed as "none after the kill".
    from pathlib import Path

    from inhouse.drill.context import DrillContext
    from inhouse.drill.drills.kill_replica import _check_kill

    watch = RouteWatch("http://gateway/metrics", "chat")
    for step in range(80):
        watch.samples.append((99.0 + 0.25 * step, {"0": 50.0 + step}, {"0": 1.0}))
    result = DrillResult("kill-replica", "now", "test")
    ctx = DrillContext(result, None, None, None, Path("."), True)  # type: ignore[arg-type]
    _check_kill(ctx, [], watch, "1", (TERM, TERM + 15.0), 4.0, None, 3.0)  # type: ignore[arg-type]
    check = next(
        c for c in result.checks if c.name == "gateway stops routing to the killed replica"
    )
    assert not check.ok and "not observed" in check.observed, check.observed


def test_a_kill_of_an_idle_replica_fails_the_cut_streams_check() -> None:
    # Nothing running on it at SIGKILL: nothing was cut, and "every broken stream ends with an
    # error event" held with no stream to show it.
    from pathlib import Path

    from inhouse.drill.context import DrillContext
    from inhouse.drill.drills.kill_replica import _check_kill

    watch = _watch([], left=TERM + 2.0, back=READY)
    cut = "streams cut by SIGKILL end with an error event"
    for running, ok in ((0.0, False), (None, False), (2.0, True)):
        result = DrillResult("kill-replica", "now", "test")
        ctx = DrillContext(result, None, None, None, Path("."), True)  # type: ignore[arg-type]
        _check_kill(ctx, [], watch, "1", (TERM, TERM + 14.0), 4.0, None, running)  # type: ignore[arg-type]
        (check,) = [c for c in result.checks if c.name == cut]
        assert check.ok is ok, (running, check.observed)


def test_a_drain_of_an_idle_replica_fails_the_in_flight_check() -> None:
    # Nothing running on it at SIGTERM: "every request in flight completes" held with none.
    watch = _watch([READY + 0.5], left=TERM + 1.0, back=READY)
    inflight = "drain: streams in flight complete"
    for running, ok in ((0.0, False), (None, False), (3.0, True)):
        result = DrillResult("kill-replica", "now", "test")
        window = drain_window_s(HEALTH, GONE - TERM)
        ctx = SimpleNamespace(result=result)
        _check_drain(ctx, [], watch, "1", TERM, GONE, 0, window, running)  # type: ignore[arg-type]
        (check,) = [c for c in result.checks if c.name == inflight]
        assert check.ok is ok, (running, check.observed)


def test_the_replica_down_alert_is_expected_at_the_severity_render_gives_it() -> None:
    """One replica lost is a ticket in the rules render writes (a rollout takes one replica out
    for its whole model load; the pool runs degraded by design): the drill waits for that alert
    and checks it arrived routed as render's rule says, not as a page it no longer is."""
    import dataclasses
    from pathlib import Path

    import yaml

    from inhouse.drill.context import DrillContext
    from inhouse.drill.drills.kill_replica import ALERT, _check_kill
    from inhouse.drill.receiver import Notified
    from inhouse.launch.demo import demo_stack
    from inhouse.render.prometheus import render_prometheus

    rules = yaml.safe_load(
        render_prometheus(demo_stack(2), "ns", "runbook.md")["prometheus/rules.yaml"]
    )
    (severity,) = {
        r["labels"]["severity"]
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("alert") == ALERT
    }
    labels = {"alertname": ALERT, "pod": "chat-1", "severity": severity}
    routed = Notified(TERM + 40.0, severity, "firing", labels, {})
    name = "replica-down alert"
    watch = _watch([], left=TERM + 2.0, back=READY)
    verdicts = {}
    for fired in (routed, dataclasses.replace(routed, receiver="other"), None):
        result = DrillResult("kill-replica", "now", "test")
        ctx = DrillContext(result, None, None, None, Path("."), True)  # type: ignore[arg-type]
        _check_kill(ctx, [], watch, "1", (TERM, TERM + 14.0), 4.0, fired, 2.0)  # type: ignore[arg-type]
        (check,) = [c for c in result.checks if c.name == name]
        verdicts[None if fired is None else fired.receiver] = check.ok
        assert severity in check.expected
    assert verdicts == {severity: True, "other": False, None: False}

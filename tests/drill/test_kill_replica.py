"""kill-replica's "rejoins only once healthy": judged against when the replica itself turned
/health 200, so the gateway taking it back before a late drill probe looked is no failure,
and routing before that moment always is."""

from __future__ import annotations

from types import SimpleNamespace

from inhouse.drill.drills.kill_replica import _check_rejoin
from inhouse.drill.evidence import DrillResult
from inhouse.drill.watch import RouteWatch

CHECK = "rejoins only once healthy (after SIGKILL)"
RESTART, READY = 100.0, 105.0  # the replica's restart, and its /health 200 by its own clock


def _watch(routed_at: float, healthy_at: float) -> RouteWatch:
    """The gateway's metrics scraped each 0.25 s: one routing decision to replica 1 counted
    by the sample at `routed_at`, the replica healthy from `healthy_at`."""
    watch = RouteWatch("http://gateway/metrics", "chat")
    for step in range(40):
        t = RESTART + 0.25 * step
        decisions = {"0": 50.0 + step, "1": 7.0 + (1.0 if t >= routed_at else 0.0)}
        watch.samples.append((t, decisions, {"0": 1.0, "1": 1.0 if t >= healthy_at else 0.0}))
    return watch


def _judge(watch: RouteWatch) -> tuple[bool, str]:
    result = DrillResult("kill-replica", "now", "test")
    _check_rejoin(SimpleNamespace(result=result), watch, "1", RESTART, READY, "after SIGKILL")  # type: ignore[arg-type]
    (check,) = result.checks
    assert check.name == CHECK
    return check.ok, check.observed


def test_the_gateway_taking_the_replica_back_once_it_is_ready_passes() -> None:
    # What failed under load: the gateway saw the 200 at +0.25 s and routed at +0.5 s, while
    # the drill's own probe, late, saw it only at +1.2 s.
    ok, observed = _judge(_watch(routed_at=READY + 0.5, healthy_at=READY + 0.25))
    assert ok, observed
    assert "0 routed before ready" in observed and "+0.2 s after ready" in observed


def test_routing_to_the_replica_before_it_is_ready_fails() -> None:
    # A gateway that takes a loading replica for healthy: routed 1 s before /health was 200.
    ok, observed = _judge(_watch(routed_at=READY - 1.0, healthy_at=RESTART))
    assert not ok
    assert "1 routed before ready" in observed


def test_routing_the_sample_just_before_ready_fails() -> None:
    # A decision counted by a scrape that came back before the replica was ready was made
    # before it: no slack.
    ok, observed = _judge(_watch(routed_at=READY - 0.25, healthy_at=READY + 0.25))
    assert not ok
    assert "1 routed before ready" in observed

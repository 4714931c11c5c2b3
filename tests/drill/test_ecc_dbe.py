"""ecc-dbe's routing check: nothing new to the drained replica after the drain's window, as
the gateway's own /metrics showed it (sampled each 0.25 s by `RouteWatch`)."""

from __future__ import annotations

from types import SimpleNamespace

from inhouse.drill.drills.ecc_dbe import check_drained_routing
from inhouse.drill.evidence import DrillResult
from inhouse.drill.watch import RouteWatch

DRAIN = 100.0
WINDOW = (3.0, "one probe, which it answers 503")


def _watch(routed: list[float], until: float, replicas: tuple[str, ...] = ("0", "1")) -> RouteWatch:
    """Samples from 99 s to `until`, a decision to replica 1 at each time in `routed`."""
    watch = RouteWatch("http://gateway/metrics", "chat")
    t = 99.0
    while t <= until:
        counts = {"0": 50.0 + t, "1": 7.0 + sum(1.0 for r in routed if r <= t)}
        watch.samples.append((t, {r: counts[r] for r in replicas}, {r: 1.0 for r in replicas}))
        t += 0.25
    return watch


def _check(watch: RouteWatch) -> tuple[bool, str]:
    result = DrillResult("ecc-dbe", "now", "test")
    check_drained_routing(SimpleNamespace(result=result), watch, "1", DRAIN, WINDOW)  # type: ignore[arg-type]
    (check,) = result.checks
    return check.ok, check.observed


def test_nothing_routed_after_the_window_passes() -> None:
    assert _check(_watch([DRAIN + 1.0], until=DRAIN + 8.0)) == (True, "last 1.0 s after")


def test_routing_after_the_window_fails() -> None:
    assert _check(_watch([DRAIN + 5.0], until=DRAIN + 8.0)) == (False, "last 5.0 s after")


def test_a_watch_that_never_saw_the_replica_fails() -> None:
    # The gateway's /metrics without the replica's series (a renamed label, a wrong URL):
    # nothing was seen routed, because nothing was seen; it passed as "none".
    ok, observed = _check(_watch([], until=DRAIN + 8.0, replicas=("0",)))
    assert not ok and "not observed" in observed, observed


def test_a_watch_that_stopped_inside_the_window_fails() -> None:
    ok, observed = _check(_watch([], until=DRAIN + 2.0))
    assert not ok and "not observed" in observed, observed


def test_a_replica_never_routed_to_is_observed_by_its_health_gauge() -> None:
    # The gateway creates a replica's routing counter at its first decision, its health gauge
    # at every scrape: a replica nothing was ever routed to is seen, with nothing routed.
    watch = _watch([], until=DRAIN + 8.0)
    watch.samples = [(t, {"0": d["0"]}, h) for t, d, h in watch.samples]
    assert _check(watch) == (True, "none")

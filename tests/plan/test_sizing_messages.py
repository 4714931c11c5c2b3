"""What the search says when a configuration cannot serve the traffic."""

from inhouse.plan.sizing import Violation


def test_an_unstable_replica_is_said_without_flag_values() -> None:
    # Read "unstable: prefill alone needs 76643% of the replica 1 ms > 0 ms".
    violation = Violation("unstable: prefill alone needs 76643% of the replica", 1.0, 0.0)
    assert str(violation) == "unstable: prefill alone needs 76643% of the replica"
    assert str(Violation("chat p95 ttft", 812.4, 760.0)) == "chat p95 ttft 812 ms > 760 ms"

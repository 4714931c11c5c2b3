from __future__ import annotations

from inhouse.fleet.events import EventKind, EventQueue


def test_events_pop_by_time_then_kind_then_push_order() -> None:
    queue: EventQueue[str] = EventQueue()
    queue.push(2.0, EventKind.ARRIVAL, "late arrival")
    queue.push(1.0, EventKind.STEP, "step")
    queue.push(1.0, EventKind.ARRIVAL, "arrival 1")
    queue.push(1.0, EventKind.STEP_END, "step end")
    queue.push(1.0, EventKind.ARRIVAL, "arrival 2")
    queue.push(0.5, EventKind.STEP, "early step")
    order = [queue.pop()[2] for _ in range(len(queue))]
    assert order == ["early step", "step end", "arrival 1", "arrival 2", "step", "late arrival"]
    assert not queue


def test_the_key_is_time_priority_sequence() -> None:
    queue: EventQueue[None] = EventQueue()
    first = queue.push(3.0, EventKind.STEP, None)
    second = queue.push(3.0, EventKind.STEP_END, None)
    assert first == (3.0, 2, 0)
    assert second == (3.0, 0, 1)
    assert second < first
    assert queue.peek_time_s() == 3.0
    assert [kind for kind in EventKind] == [EventKind.STEP_END, EventKind.ARRIVAL, EventKind.STEP]

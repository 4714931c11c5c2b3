"""`sse.EventSplitter` and `payload`: events split where they end, whatever the reads."""

from __future__ import annotations

from inhouse.http1.sse import EventSplitter, payload


def test_events_split_across_reads_come_out_whole_and_in_order() -> None:
    body = b'data: {"a":1}\n\n: ping\n\ndata: [DONE]\n\n'
    for size in (1, 2, 5, len(body)):
        splitter = EventSplitter()
        events = []
        for start in range(0, len(body), size):
            events += splitter.split(body[start : start + size])
        assert events == [b'data: {"a":1}', b": ping", b"data: [DONE]"]
        assert splitter.rest == b""


def test_an_unfinished_event_is_kept_as_the_rest() -> None:
    splitter = EventSplitter()
    assert splitter.split(b"data: 1\n\ndata: 2") == [b"data: 1"]
    assert splitter.rest == b"data: 2"


def test_payload_is_the_data_field_and_none_for_comments() -> None:
    assert payload(b'data: {"a":1}') == b'{"a":1}'
    assert payload(b"data:[DONE]") == b"[DONE]"
    assert payload(b'{"a":1}') == b'{"a":1}'
    assert payload(b": ping") is None
    assert payload(b"") is None

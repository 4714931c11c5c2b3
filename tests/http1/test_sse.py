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


def test_crlf_and_cr_line_endings_end_events_too() -> None:
    """SSE allows CRLF, LF or CR line endings; a CRLF stream was read as one unfinished event,
    and every request through such a server failed as 'bad SSE message'."""
    for newline in (b"\r\n", b"\r"):
        body = b'data: {"a":1}\n\n: ping\n\ndata: [DONE]\n\n'.replace(b"\n", newline)
        for size in (1, 2, 3, len(body)):  # a read may end between the CR and the LF
            splitter = EventSplitter()
            events = []
            for start in range(0, len(body), size):
                events += splitter.split(body[start : start + size])
            assert events == [b'data: {"a":1}', b": ping", b"data: [DONE]"], (newline, size)
            assert splitter.rest.strip() == b""


def test_payload_reads_the_data_lines_of_an_event_with_other_fields() -> None:
    """An event may carry comment, `event:`, `id:` and `retry:` lines beside its data; its
    data was read as the whole event (a failure), or dropped when a comment came first."""
    assert payload(b': ping\ndata: {"a":1}') == b'{"a":1}'
    assert payload(b'event: message\nid: 7\ndata: {"a":1}') == b'{"a":1}'
    assert payload(b'retry: 100\ndata:{"a":1}') == b'{"a":1}'
    assert payload(b'data: {"a":\ndata: 1}') == b'{"a":\n1}'  # fields join with a newline
    assert payload(b": ping\n: pong") is None
    assert payload(b"event: ping") is None

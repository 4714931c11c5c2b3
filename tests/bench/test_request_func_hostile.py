"""Garbage from the server: each such request is a failure with a reason, so its timings stay
out of TTFT and ITL (the summary reads successes only)."""

from __future__ import annotations

import pytest

from inhouse.bench.metrics import Outcome
from inhouse.bench.request_func import OpenAIStream

OK = b'data: {"choices":[{"text":"a"}]}\n\n'
DONE = b"data: [DONE]\n\n"
SSE = [(b"content-type", b"text/event-stream")]
JSON = [(b"content-type", b"application/json")]


def answer(*parts: bytes, headers: list[tuple[bytes, bytes]] = SSE) -> Outcome:
    outcome = Outcome(0, 0.0)
    stream = OpenAIStream(outcome, keep_text=False)
    stream.on_head(200, headers)
    for i, part in enumerate(parts):
        stream.on_body(part, 1.0 + i)
    stream.on_end(9.0)
    return outcome


def test_a_whole_stream_is_a_success() -> None:
    o = answer(OK, OK, DONE)
    assert (o.success, o.error, o.num_chunks, o.ttft_s, o.itl_s) == (True, "", 2, 1.0, [1.0])


def test_a_stream_that_ends_before_done_is_a_failure() -> None:
    o = answer(OK, OK)
    assert not o.success
    assert o.error == "the stream ended without `data: [DONE]` (cut short)"


@pytest.mark.parametrize(
    "bad",
    [
        b'data: {"choices":"xyz"}\n\n',
        b'data: {"choices":{"a":1}}\n\n',
        b'data: {"choices":[{"delta":"x"}]}\n\n',
        b'data: {"choices":[],"usage":"x"}\n\n',
    ],
)
def test_a_message_of_the_wrong_shape_is_a_failure_with_the_message(bad: bytes) -> None:
    o = answer(OK, bad, OK, DONE)
    assert not o.success
    assert o.error.startswith("SSE message of an unexpected shape: ")
    assert bad[6:-2].decode() in o.error


def test_a_non_json_message_is_a_failure() -> None:
    o = answer(OK, b"data: hello\n\n", OK, DONE)
    assert not o.success and o.error == "bad SSE message: b'hello'"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"<html></html>", "bad JSON body"),
        (b'{"choices":"abc"}', "response has no choices"),
        (b'{"choices":[{"text":"a"}],"usage":[1,2]}', "usage that is not an object"),
    ],
)
def test_a_whole_answer_that_is_not_one_is_a_failure(body: bytes, says: str) -> None:
    o = answer(body, headers=JSON)
    assert not o.success and says in o.error

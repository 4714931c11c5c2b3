"""Garbage from the server: each such request is a failure with a reason, so its timings stay
out of TTFT and ITL (the summary reads successes only)."""

from __future__ import annotations

import asyncio
import time

import pytest

from inhouse.bench.http import Client
from inhouse.bench.metrics import Outcome, RequestResult, summarize
from inhouse.bench.request_func import Job, OpenAIStream, Target

OK = b'data: {"choices":[{"text":"a"}]}\n\n'
DONE = b"data: [DONE]\n\n"
SSE = [(b"content-type", b"text/event-stream")]
JSON = [(b"content-type", b"application/json")]


def answer(*parts: bytes, headers: list[tuple[bytes, bytes]] = SSE) -> Outcome:
    outcome = Outcome(0, 0.0)
    stream = OpenAIStream(outcome, keep_text=True)
    stream.on_head(200, headers)
    for i, part in enumerate(parts):
        stream.on_body(part, 1.0 + i)
    stream.on_end(9.0)
    return outcome


def test_a_whole_stream_is_a_success() -> None:
    o = answer(OK, OK, DONE)
    assert (o.success, o.error, o.num_chunks, o.ttft_s, o.itl_s) == (True, "", 2, 1.0, [1.0])
    assert o.text == "aa"


def test_a_whole_answer_with_usage_is_a_success() -> None:
    body = b'{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":2}}'
    o = answer(body, headers=JSON)
    assert (o.success, o.error, o.text, o.completion_tokens) == (True, "", "hi", 2)


def test_a_usage_count_that_is_not_a_count_fails_the_request_not_the_summary() -> None:
    o = answer(OK, b'data: {"choices":[],"usage":{"completion_tokens":"5"}}\n\n', DONE)
    assert not o.success
    summary = summarize([RequestResult(o, "r0", 10)], 1.0)
    assert (summary["completed"], summary["failed"]) == (0, 1)


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
        b'data: {"choices":[{"delta":{"content":["a"]}}]}\n\n',
        b'data: {"choices":[],"usage":{"completion_tokens":"5"}}\n\n',
        b'data: {"choices":[],"usage":{"prompt_tokens":-1}}\n\n',
        b'data: {"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":1.5}}}\n\n',
        b"data: 42\n\n",  # JSON, but no object: was skipped as if it were not there
        b'data: ["a"]\n\n',
        b"data: null\n\n",
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
        (b'{"choices":[]}', "response has no choices"),
        (b'{"choices":"abc"}', "response of an unexpected shape"),
        (b'{"choices":[{"message":"x"}]}', "response of an unexpected shape"),
        (b'{"choices":[{"text":["a"]}]}', "response of an unexpected shape"),
        (b'{"choices":[{"text":"a"}],"usage":[1,2]}', "response of an unexpected shape"),
        (b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":"5"}}', "unexpected shape"),
    ],
)
def test_a_whole_answer_that_is_not_one_is_a_failure(body: bytes, says: str) -> None:
    o = answer(body, headers=JSON)
    assert not o.success and says in o.error


async def send_to_raw_server(
    response: bytes, trickle: bytes = b"", byte_gap_s: float = 0.0, timeout_s: float = 0.5
) -> Outcome:
    """`response` at once, then `trickle` one byte a write, `byte_gap_s` apart."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(response)
        await writer.drain()
        for i in range(len(trickle)):
            writer.write(trickle[i : i + 1])
            await writer.drain()
            await asyncio.sleep(byte_gap_s)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    client = Client(Target("127.0.0.1", server.sockets[0].getsockname()[1]))
    job = Job(0, time.perf_counter(), "/v1/completions", b"{}", timeout_s=timeout_s)
    try:
        return await asyncio.wait_for(client.send(job), timeout_s + 5.0)
    finally:
        client.close()
        server.close()


def test_a_close_delimited_answer_of_the_wrong_shape_ends_instead_of_hanging() -> None:
    """The body ends when the server closes; reading it used to raise inside connection_lost,
    and the request never ended (not even at its timeout), so the run never finished."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
    o = asyncio.run(send_to_raw_server(head + b'{"choices":[{"message":"x"}]}'))
    assert not o.success and "unexpected shape" in o.error


def test_a_close_delimited_stream_cut_short_is_a_failure() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    o = asyncio.run(send_to_raw_server(head + OK + OK))
    assert not o.success and o.num_chunks == 2 and "without `data: [DONE]`" in o.error


def test_a_crlf_stream_is_read_like_an_lf_one() -> None:
    """SSE allows CRLF line endings; every request to such a server failed."""
    crlf = [part.replace(b"\n", b"\r\n") for part in (OK, OK, DONE)]
    o = answer(*crlf)
    assert (o.success, o.error, o.num_chunks, o.ttft_s, o.itl_s) == (True, "", 2, 1.0, [1.0])


def test_a_comment_line_in_front_of_the_data_does_not_hide_the_first_token() -> None:
    """`: ping` on the line before `data:` (one event): the event was read as a comment and
    dropped, so TTFT moved to the second chunk and one chunk went missing."""
    o = answer(b": ping\n" + OK, b"event: message\nid: 2\n" + OK, DONE)
    assert (o.success, o.error, o.num_chunks, o.ttft_s, o.itl_s) == (True, "", 2, 1.0, [1.0])


def test_events_cut_at_every_byte_over_a_socket_are_read_whole() -> None:
    """A `data:` line split across TCP reads (CRLF, comments, a usage-only chunk)."""
    body = (
        b": ping\r\n\r\n"
        + b'data: {"choices":[{"text":"a"}]}\r\n\r\n' * 2
        + b'data: {"choices":[],"usage":{"completion_tokens":2,"prompt_tokens":3}}\r\n\r\n'
        + b"data: [DONE]\r\n\r\n"
    )
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    o = asyncio.run(send_to_raw_server(head, body, byte_gap_s=0.0005, timeout_s=10.0))
    assert (o.success, o.error, o.num_chunks, o.completion_tokens) == (True, "", 2, 2)


ROLE = b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
NULL = b'data: {"choices":[{"delta":{"content":null}}]}\n\n'
TOKEN = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
FINISH = b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'


def test_without_usage_only_chunks_with_output_count_as_tokens() -> None:
    """N_out without usage was the number of `choices` chunks: the role chunk, a null-content
    chunk and the finish chunk counted as tokens (vllm#3759), so a one-token answer got
    N_out = 4 and a TPOT. vLLM's fallback re-tokenizes the text: one token here."""
    o = answer(ROLE, NULL, TOKEN, FINISH, DONE)
    assert (o.success, o.num_chunks, o.ttft_s) == (True, 4, 1.0)  # TTFT still at the role chunk
    r = RequestResult(o, "r0", 10)
    assert (r.output_len, r.tpot_s) == (1, 0.0)
    summary = summarize([r], 1.0)
    assert summary["total_output_tokens"] == 1
    assert summary["mean_tpot_ms"] == 0.0  # no request with N_out > 1


def test_usage_on_a_chunk_with_choices_is_read() -> None:
    """Some servers put `usage` on the last token chunk, not on a chunk of its own; it was
    ignored, and N_out fell back to counting chunks."""
    last = (
        b'data: {"choices":[{"delta":{"content":"y"},"finish_reason":"length"}],'
        b'"usage":{"prompt_tokens":5,"completion_tokens":7,'
        b'"prompt_tokens_details":{"cached_tokens":4}}}\n\n'
    )
    o = answer(ROLE, TOKEN, last, DONE)
    assert o.success
    assert (o.completion_tokens, o.prompt_tokens, o.cached_tokens) == (7, 5, 4)
    assert RequestResult(o, "r0", 10).output_len == 7


def test_a_stream_that_ended_with_a_finish_reason_but_no_done_is_a_success() -> None:
    """The answer is whole once a choice has its `finish_reason`; a server that then ends the
    response without `data: [DONE]` failed every request (vLLM's bench counts them)."""
    o = answer(ROLE, TOKEN, FINISH)
    assert (o.success, o.error, o.num_chunks) == (True, "", 3)
    cut = answer(ROLE, TOKEN)  # no finish_reason: cut short, as before
    assert not cut.success and "without `data: [DONE]`" in cut.error


def test_a_close_delimited_stream_with_a_finish_reason_is_a_success() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    o = asyncio.run(send_to_raw_server(head + OK + OK.replace(b"}]", b',"finish_reason":"stop"}]')))
    assert (o.success, o.error, o.num_chunks) == (True, "", 2)


def test_a_server_that_stalls_after_a_token_fails_the_request_at_its_timeout() -> None:
    async def go() -> tuple[Outcome, float]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            writer.write(head + b"transfer-encoding: chunked\r\n\r\n")
            writer.write(b"%x\r\n%s\r\n" % (len(OK), OK))
            await writer.drain()
            await stalled.wait()  # never sends the rest
            writer.close()

        stalled = asyncio.Event()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        client = Client(Target("127.0.0.1", server.sockets[0].getsockname()[1]))
        t = time.perf_counter()
        job = Job(0, t, "/v1/completions", b"{}", timeout_s=0.3)
        outcome = await asyncio.wait_for(client.send(job), 5.0)
        elapsed = time.perf_counter() - t
        stalled.set()
        client.close()
        server.close()
        return outcome, elapsed

    o, elapsed_s = asyncio.run(go())
    assert (o.success, o.error, o.num_chunks) == (False, "timed out after 0.3 s", 1)
    assert 0.3 <= elapsed_s < 2.0


def test_per_token_gaps_start_at_the_first_token_not_the_role_chunk() -> None:
    """With continuous usage stats, a role chunk (0 tokens) sent before prefill made the first
    token's wait (prefill) a per-token gap: `itl_per_token` is the gaps between tokens."""

    def chunk(delta: bytes, tokens: int) -> bytes:
        usage = b'"usage":{"prompt_tokens":3,"completion_tokens":%d}' % tokens
        return b'data: {"choices":[{"delta":%s}],%s}\n\n' % (delta, usage)

    o = answer(
        chunk(b'{"role":"assistant","content":""}', 0),  # at 1 s
        chunk(b'{"content":"a"}', 1),  # at 2 s: the first token
        chunk(b'{"content":""}', 1),  # at 3 s: no token
        chunk(b'{"content":"bc"}', 3),  # at 4 s: two tokens, 2 s after the first
        DONE,
    )
    assert o.success and o.per_token_itl_s == [1.0, 1.0]


def test_reasoning_and_tool_call_deltas_are_output() -> None:
    """Reasoning (`reasoning_content`, `reasoning`) and tool-call deltas are tokens: they set
    `ttft_content` and count in N_out without usage; only `content` goes into the text."""
    reasoning = b'data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}\n\n'
    reasoning_new = b'data: {"choices":[{"delta":{"reasoning":"so"}}]}\n\n'
    tool = b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1"}]}}]}\n\n'
    o = answer(ROLE, reasoning, reasoning_new, tool, TOKEN, FINISH, DONE)
    assert (o.success, o.ttft_s, o.ttft_content_s, o.text) == (True, 1.0, 2.0, "x")
    assert RequestResult(o, "r0", 10).output_len == 4


def test_a_stream_cut_mid_event_says_so() -> None:
    """Cut inside a `data:` line, the stream's last bytes were reported as 'bad SSE message',
    as if the server had sent garbage."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    o = asyncio.run(send_to_raw_server(head + OK + b'data: {"choices":[{"te'))
    assert not o.success and o.num_chunks == 1
    assert o.error == 'the stream ended mid-event (cut short): b\'data: {"choices":[{"te\''


def test_an_html_page_sent_as_an_event_stream_is_a_bad_message_not_a_cut() -> None:
    o = answer(b"<html><body>502 Bad Gateway</body></html>")
    assert not o.success and o.error.startswith("bad SSE message: b'<html>")


@pytest.mark.parametrize("headers", [[], [(b"content-type", b"text/plain")], JSON])
def test_an_event_stream_with_the_wrong_content_type_is_read_as_one(
    headers: list[tuple[bytes, bytes]],
) -> None:
    """A stream sent as text/plain, JSON or with no content type (a proxy rewrote it): it was
    read as one whole JSON body, and every request failed as 'bad JSON body'."""
    o = answer(b": ping\n\n", OK, OK, DONE, headers=headers)
    assert (o.success, o.error, o.num_chunks, o.ttft_s, o.itl_s) == (True, "", 2, 2.0, [1.0])


def test_an_error_event_in_the_older_vllm_shape_fails_the_request() -> None:
    """vLLM before its `{"error": {...}}` shape sent `{"object": "error", "message": ...}` in
    the stream; it was skipped, and a stream that broke off counted as a success."""
    error = b'data: {"object":"error","message":"boom","type":"InternalServerError","code":500}'
    o = answer(OK, error + b"\n\n", DONE)
    assert (o.success, o.error) == (False, "error event in stream: boom")


def test_a_last_error_event_with_no_blank_line_after_it_keeps_its_message() -> None:
    o = answer(OK, b'data: {"error":{"message":"boom"}}')
    assert (o.success, o.error) == (False, "error event in stream: boom")

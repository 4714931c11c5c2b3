"""The API server in front of the scheduler: one queue for prompts and streamed tokens."""

from __future__ import annotations

import pytest

from inhouse.engine import Request

from .test_engine_core import run_to_completion


def test_prompts_arriving_together_are_processed_one_at_a_time(make_engine) -> None:
    engine = make_engine(request_overhead_s=0.01, prompt_token_overhead_s=1e-5)
    requests = [Request(f"r{i}", 1000, 2, 0.0) for i in range(3)]
    for request in requests:
        engine.add_request(request)
    # 1000 tokens x 10 us = 10 ms of API-server work each, in turn; then 10 ms of latency
    assert [r.ready_s for r in requests] == pytest.approx([0.02, 0.03, 0.04])


def test_a_prompt_arriving_after_the_queue_drained_does_not_wait(make_engine) -> None:
    engine = make_engine(prompt_token_overhead_s=1e-5)
    engine.add_request(Request("a", 1000, 2, 0.0))
    late = Request("b", 1000, 2, 1.0)
    engine.add_request(late)
    assert late.ready_s == pytest.approx(1.01)


def test_streamed_tokens_reach_clients_when_the_api_server_has_sent_them(make_engine) -> None:
    quiet = make_engine()
    busy = make_engine(output_token_overhead_s=0.002)
    seen = []
    for engine in (quiet, busy):
        requests = [Request(f"r{i}", 100, 20, 0.0) for i in range(8)]
        for request in requests:
            engine.add_request(request)
        run_to_completion(engine)
        seen.append(requests)
    for a, b in zip(*seen, strict=True):
        # 8 streams x 2 ms = 16 ms of output work a step, more than a decode step takes
        assert b.first_token_s > a.first_token_s
        assert b.finish_s - b.first_token_s > 19 * 0.016 * 0.99


def test_without_output_overhead_tokens_are_seen_at_the_step_end(make_engine) -> None:
    engine = make_engine()
    request = Request("a", 50, 3, 0.0)
    engine.add_request(request)
    end = run_to_completion(engine)
    assert request.finish_s == end

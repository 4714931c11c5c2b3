from __future__ import annotations

import itertools

from inhouse.workload import AgentWorkload, Lengths

from .conftest import drive

BS = 16


def test_each_turn_re_sends_the_previous_turn_whole_prompt_and_output() -> None:
    run = AgentWorkload(sessions=5).start(block_size=BS, seed=1, duration_s=300)
    requests = drive(run)
    by_session: dict[str, list] = {}
    for request in requests:
        by_session.setdefault(request.session_key, []).append(request)  # type: ignore[arg-type]
    assert len(by_session) > 5  # finished sessions were replaced
    for turns in by_session.values():
        for before, after in itertools.pairwise(turns):
            sent = before.num_prompt_tokens + before.output_len
            assert after.num_prompt_tokens > sent
            assert after.block_hashes[: len(before.block_hashes)] == before.block_hashes
            assert len(before.block_hashes) == sent // BS  # prompt and output blocks
            assert before.num_prompt_blocks == before.num_prompt_tokens // BS
            assert after.num_ideal_cached_tokens == len(before.block_hashes) * BS


def test_a_first_turn_hits_its_apps_system_prompt_once_the_app_was_seen() -> None:
    spec = AgentWorkload(sessions=40, num_apps=2, system_prompt_tokens=6000, ramp_s=1.0)
    requests = drive(spec.start(block_size=BS, seed=2, duration_s=2))
    firsts = list({r.session_key: r for r in reversed(requests)}.values())  # first turns
    assert len(firsts) == 40
    ideal = sorted({r.num_ideal_cached_tokens for r in firsts})
    assert ideal == [0, 6000 // BS * BS]
    assert sum(1 for r in firsts if r.num_ideal_cached_tokens == 0) == 2  # one miss per app
    # apps share their system prompt's blocks; a session's own blocks are its own
    shared = 6000 // BS
    heads = {tuple(r.block_hashes[:shared]) for r in firsts}
    assert len(heads) == 2


def test_sessions_run_in_parallel_and_rate_scale_multiplies_them() -> None:
    def open_sessions(scale: float) -> int:
        run = AgentWorkload(sessions=10, ramp_s=0.0).start(
            block_size=BS, seed=0, duration_s=100, rate_scale=scale
        )
        return sum(1 for _ in range(1000) if run.next_arrival_s() == 0.0 and run.pop_arrival())

    assert open_sessions(1.0) == 10
    assert open_sessions(2.0) == 20


def test_same_seed_same_requests_other_seed_others() -> None:
    def requests(seed: int):
        return drive(AgentWorkload(sessions=8).start(block_size=BS, seed=seed, duration_s=120))

    assert requests(4) == requests(4)
    assert requests(4) != requests(5)


def test_theoretical_hit_rate_is_the_token_weighted_ideal() -> None:
    run = AgentWorkload(sessions=20, first_message=Lengths(300, 300)).start(
        block_size=BS, seed=3, duration_s=200
    )
    requests = drive(run)
    ideal = sum(r.num_ideal_cached_tokens for r in requests)
    prompt = sum(r.num_prompt_tokens for r in requests)
    assert run.theoretical_hit_rate == ideal / prompt
    assert 0.7 < run.theoretical_hit_rate < 0.95
    assert run.reaction_delay_s == 0.5

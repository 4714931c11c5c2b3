"""`agent`: multi-turn agent sessions that re-send their growing history.

A session belongs to one of `num_apps` applications, each with its own system prompt of
`system_prompt_tokens`. Turn 1 sends the system prompt and a first user message; every later
turn re-sends the whole history — previous prompt, previous output — plus a tool output, after a
think time (the tool running, the user reading). A session has `min_turns..max_turns` turns.

Sessions run `sessions` at a time (closed loop over sessions: a finished session's slot starts a
new one after a think time), or, with `session_rate_per_s > 0`, start as a Poisson process.
Rate scaling multiplies `sessions` (or the session rate).

Block hashes cover the prompt and the output blocks the next turn re-sends, so the engine caches
the output as vLLM does. The ideal cache hits, per turn, the whole previous turn (prompt and
output); a first turn hits its app's system prompt if any earlier session of the app arrived.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from inhouse.hashing import SpanHasher
from inhouse.workload.arrivals import Lengths, sample_think_s
from inhouse.workload.base import ScheduledRun, WorkRequest, ideal_cached_tokens


@dataclass(frozen=True, slots=True)
class AgentWorkload:
    sessions: int = 100
    session_rate_per_s: float = 0.0
    num_apps: int = 4
    system_prompt_tokens: int = 6000
    min_turns: int = 3
    max_turns: int = 6
    first_message: Lengths = field(default_factory=lambda: Lengths(400, 1500))
    tool_output: Lengths = field(default_factory=lambda: Lengths(1000, 4000))
    output: Lengths = field(default_factory=lambda: Lengths(250, 800))
    think_time_s: float = 3.0
    min_think_s: float = 0.5
    ramp_s: float = 10.0
    model: str | None = None

    name = "agent"

    def __post_init__(self) -> None:
        assert self.sessions > 0 and self.num_apps > 0, "sessions and num_apps must be positive"
        assert 1 <= self.min_turns <= self.max_turns, "need 1 <= min_turns <= max_turns"
        assert self.system_prompt_tokens >= 0, "system_prompt_tokens must be >= 0"

    def start(
        self, *, block_size: int, seed: int, duration_s: float, rate_scale: float = 1.0
    ) -> AgentRun:
        return AgentRun(self, block_size, seed, duration_s, rate_scale)


@dataclass(slots=True)
class _Session:
    key: str
    app: int
    turns_left: int
    hasher: SpanHasher
    num_known_blocks: int = 0  # blocks of the history already sent (prompt + output)


class AgentRun(ScheduledRun):
    def __init__(
        self, spec: AgentWorkload, block_size: int, seed: int, duration_s: float, scale: float
    ) -> None:
        super().__init__("agent", duration_s)
        self.spec = spec
        self.block_size = block_size
        self.reaction_delay_s = spec.min_think_s
        self._rng = random.Random(f"agent:{seed}")
        self._arrival_rng = random.Random(f"agent-arrivals:{seed}")
        self._span = itertools.count(1)
        self._system_span = [next(self._span) for _ in range(spec.num_apps)]
        self._app_seen = [False] * spec.num_apps
        self._system_hasher: dict[int, SpanHasher] = {}
        self._num_sessions = 0
        self._session_of: dict[str, _Session] = {}
        if spec.session_rate_per_s > 0:
            self._session_rate = spec.session_rate_per_s * scale
            self.schedule(0.0, self._start_open_session)
        else:
            for _ in range(max(1, round(spec.sessions * scale))):
                self.schedule(self._arrival_rng.uniform(0.0, spec.ramp_s), self._start_session)

    def _start_open_session(self, request_id: str, at_s: float) -> WorkRequest:
        gap_s = self._arrival_rng.expovariate(self._session_rate)
        self.schedule(at_s + gap_s, self._start_open_session)
        return self._start_session(request_id, at_s)

    def _start_session(self, request_id: str, at_s: float) -> WorkRequest:
        spec = self.spec
        rng = self._rng
        app = rng.randrange(spec.num_apps)
        turns = rng.randint(spec.min_turns, spec.max_turns)
        session = _Session(f"s{self._num_sessions}", app, turns, self._system_prompt(app))
        self._num_sessions += 1
        if self._app_seen[app]:
            session.num_known_blocks = spec.system_prompt_tokens // self.block_size
        self._app_seen[app] = True
        return self._turn(session, request_id, at_s, spec.first_message.sample(rng))

    def _system_prompt(self, app: int) -> SpanHasher:
        """A hasher holding the app's system prompt: hashed once per app, copied per session."""
        template = self._system_hasher.get(app)
        if template is None:
            template = SpanHasher(self.block_size)
            template.extend(self._system_span[app], self.spec.system_prompt_tokens)
            self._system_hasher[app] = template
        return template.copy()

    def _turn(
        self, session: _Session, request_id: str, at_s: float, new_tokens: int
    ) -> WorkRequest:
        hasher = session.hasher
        hasher.extend(next(self._span), new_tokens)
        num_prompt_tokens = hasher.num_tokens
        num_prompt_blocks = len(hasher.hashes)
        output_len = self.spec.output.sample(self._rng)
        hasher.extend(next(self._span), output_len)
        hashes = list(hasher.hashes)
        ideal = ideal_cached_tokens(num_prompt_tokens, session.num_known_blocks, self.block_size)
        session.num_known_blocks = len(hashes)
        session.turns_left -= 1
        self._session_of[request_id] = session
        return WorkRequest(
            request_id,
            at_s,
            num_prompt_tokens,
            output_len,
            hashes,
            num_prompt_blocks,
            ideal,
            session.key,
            self.spec.model,
        )

    def on_complete(self, request: WorkRequest, finish_s: float, ok: bool = True) -> None:
        session = self._session_of.pop(request.request_id, None)
        if session is None:
            return
        spec = self.spec
        think_s = sample_think_s(self._arrival_rng, spec.think_time_s, spec.min_think_s)
        if ok and session.turns_left > 0:

            def next_turn(request_id: str, at_s: float) -> WorkRequest:
                return self._turn(session, request_id, at_s, spec.tool_output.sample(self._rng))

            self.schedule(finish_s + think_s, next_turn)
        elif spec.session_rate_per_s <= 0:
            self.schedule(finish_s + think_s, self._start_session)

    @property
    def num_sessions(self) -> int:
        return self._num_sessions

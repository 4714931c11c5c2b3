"""Workload characterization: the requirements' traffic as request shapes the planner can reason
about, drawn from the very generators the fleet simulator replays.

For each workload the seeded generator (`inhouse.workload`) is run on its own — completions are
fed back at a nominal latency so multi-turn sessions advance — and every request's prompt length,
output length and ideal prefix-cache hit are kept. The analytic model works on these samples, so
the planner and the verification see the same prompt and reuse distributions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from inhouse.errors import SpecError
from inhouse.plan.workload_req import WorkloadReq
from inhouse.workload import (
    AgentWorkload,
    Arrivals,
    Lengths,
    LongContextWorkload,
    SharedPrefixWorkload,
    UtilityWorkload,
    Workload,
)

# Requests sampled per workload for characterization, and the block size used to hash them.
NUM_SAMPLES = 600
SAMPLE_BLOCK_SIZE = 16
# Share of the generator's ideal hit rate an LRU cache behind cache-aware routing keeps, when the
# requirements state no prefix reuse of their own.
DEFAULT_CACHE_EFFICIENCY = 0.9
# Nominal turn latency used only to advance sessions while sampling shapes.
NOMINAL_E2E_S = 5.0


@dataclass(frozen=True, slots=True)
class Shapes:
    """Per-request arrays (equal length): prompt tokens, tokens expected from the prefix cache,
    output tokens."""

    prompt: np.ndarray
    cached: np.ndarray
    output: np.ndarray

    @property
    def uncached(self) -> np.ndarray:
        out: np.ndarray = np.maximum(self.prompt - self.cached, 1.0)
        return out

    def select(self, mask: np.ndarray) -> Shapes:
        return Shapes(self.prompt[mask], self.cached[mask], self.output[mask])


@dataclass(frozen=True, slots=True)
class TrafficProfile:
    """One workload, characterized.

    * `shapes`: the sampled requests, cached tokens scaled to the expected hit rate.
    * `ideal_hit_rate`: what an infinite cache hits on these samples (token-weighted);
      `expected_hit_rate`: what the plan assumes (`prefix_reuse`, or 90% of the ideal).
    * `peak_rate_per_s`, `avg_rate_per_s`: open-loop rates; for session traffic, `peak_sessions`,
      `avg_sessions` and `think_time_s` instead, and the rate follows from the latency
      (Little's law: sessions / (turn latency + think time)).
    * `working_set_shared_tokens`: prefix tokens every replica keeps warm (system prompts,
      instructions); `working_set_per_session_tokens`: history a live session keeps warm on its
      replica (agents); `working_set_spread_tokens`: other reusable tokens spread over replicas.
    * `arrival_cv2`: squared coefficient of variation of inter-arrival gaps (1 for Poisson).
    """

    name: str
    kind: str
    shapes: Shapes
    ideal_hit_rate: float
    expected_hit_rate: float
    peak_rate_per_s: float
    avg_rate_per_s: float
    peak_sessions: int
    avg_sessions: int
    think_time_s: float
    working_set_shared_tokens: float
    working_set_per_session_tokens: float
    working_set_spread_tokens: float
    arrival_cv2: float
    max_prompt_tokens: int

    @property
    def is_sessions(self) -> bool:
        return self.peak_sessions > 0

    @property
    def mean_prompt(self) -> float:
        return float(np.mean(self.shapes.prompt))

    @property
    def mean_output(self) -> float:
        return float(np.mean(self.shapes.output))

    def quantile(self, field: str, q: float) -> float:
        return float(np.quantile(getattr(self.shapes, field), q))

    def scaled(
        self,
        *,
        prompt_p95_factor: float = 1.0,
        output_p95_factor: float = 1.0,
        hit_factor: float = 1.0,
        cv2_factor: float = 1.0,
        load_factor: float = 1.0,
    ) -> TrafficProfile:
        """The same workload with a heavier prompt or output tail (p50 kept, p95 times the
        factor: a lognormal with a wider sigma), a scaled hit rate, burstier arrivals or more
        load. Longer outputs leave the prompts as sampled (an agent's later turns, which carry
        earlier answers, are not lengthened with them)."""
        shapes = self.shapes
        prompt = shapes.prompt
        if prompt_p95_factor != 1.0:
            new_prompt = heavier_tail(prompt, prompt_p95_factor)
            shapes = Shapes(new_prompt, shapes.cached * new_prompt / prompt, shapes.output)
        if output_p95_factor != 1.0:
            shapes = Shapes(
                shapes.prompt, shapes.cached, heavier_tail(shapes.output, output_p95_factor)
            )
        if hit_factor != 1.0:
            shapes = Shapes(shapes.prompt, shapes.cached * hit_factor, shapes.output)
        hit = float(np.sum(shapes.cached) / np.sum(shapes.prompt))
        return replace(
            self,
            shapes=shapes,
            expected_hit_rate=hit,
            peak_rate_per_s=self.peak_rate_per_s * load_factor,
            avg_rate_per_s=self.avg_rate_per_s * load_factor,
            peak_sessions=round(self.peak_sessions * load_factor),
            avg_sessions=round(self.avg_sessions * load_factor),
            arrival_cv2=self.arrival_cv2 * cv2_factor,
            max_prompt_tokens=round(self.max_prompt_tokens * prompt_p95_factor),
        )


def heavier_tail(values: np.ndarray, p95_factor: float) -> np.ndarray:
    """The lengths with their median kept and their p95 times `p95_factor`: each value's
    log-distance from the median stretched alike (a lognormal's sigma widened), whole tokens,
    at least 1."""
    p50 = float(np.median(values))
    p95 = float(np.quantile(values, 0.95))
    k = 1.0 + math.log(p95_factor) / math.log(max(p95 / p50, 1.05))
    out: np.ndarray = np.maximum(np.round(p50 * (values / p50) ** k), 1.0)
    return out


def max_prompt_tokens(req: WorkloadReq) -> int:
    """Longest prompt the workload sends: stated, or 4x the p95 (agents: a session of the most
    turns, each twice its p95)."""
    if req.max_prompt_tokens is not None:
        return req.max_prompt_tokens
    if req.kind == "agent":
        mt = req.multi_turn
        assert mt is not None
        turn = 2 * mt.tool_output_tokens.p95 + 2 * req.output_tokens.p95
        return mt.system_prompt_tokens + 2 * mt.first_message_tokens.p95 + mt.max_turns * turn
    assert req.prompt_tokens is not None
    return 4 * req.prompt_tokens.p95


def make_workload(
    req: WorkloadReq,
    model: str,
    *,
    prompt_p95_factor: float = 1.0,
    burstiness_factor: float = 1.0,
) -> Workload:
    """The `inhouse.workload` generator for a requirement, sending `model` as the model name."""
    out = _lengths(req.output_tokens.p50, req.output_tokens.p95, 1, 8 * req.output_tokens.p95)
    shape = req.burstiness / burstiness_factor
    arrivals = Arrivals("poisson" if shape == 1.0 else "gamma", 1.0, shape)
    if req.kind == "agent":
        mt = req.multi_turn
        assert mt is not None
        return AgentWorkload(
            sessions=req.traffic.sessions("peak"),
            num_apps=mt.num_apps,
            system_prompt_tokens=mt.system_prompt_tokens,
            min_turns=mt.min_turns,
            max_turns=mt.max_turns,
            first_message=_scaled(mt.first_message_tokens.p50, mt.first_message_tokens.p95, 1.0),
            tool_output=_scaled(
                mt.tool_output_tokens.p50, mt.tool_output_tokens.p95, prompt_p95_factor
            ),
            output=out,
            think_time_s=mt.think_time_s,
            min_think_s=min(0.5, mt.think_time_s),
            model=model,
        )
    arrivals = replace(arrivals, rate_per_s=req.traffic.rate_per_s("peak"))
    prompt = req.prompt_tokens
    assert prompt is not None
    p95 = round(prompt.p95 * prompt_p95_factor)
    limit = round(max_prompt_tokens(req) * prompt_p95_factor)
    if req.kind == "utility":
        fixed = min(req.shared_prefix_tokens, prompt.p50 - 1)
        return UtilityWorkload(
            arrivals=arrivals,
            num_tasks=req.num_prefix_groups,
            instruction_tokens=fixed,
            document=_lengths(prompt.p50 - fixed, p95 - fixed, 1, limit - fixed),
            output=out,
            model=model,
        )
    if req.kind == "shared-prefix":
        fixed = min(req.shared_prefix_tokens, prompt.p50 - 1)
        return SharedPrefixWorkload(
            arrivals=arrivals,
            num_groups=req.num_prefix_groups,
            prefix_tokens=fixed,
            suffix=_lengths(prompt.p50 - fixed, p95 - fixed, 1, limit - fixed),
            output=out,
            model=model,
        )
    # longctx: reuse comes from documents asked about again, 1/(1 - reuse) questions each.
    return LongContextWorkload(
        arrivals=arrivals,
        prompt=_lengths(prompt.p50, p95, min(256, prompt.p50), limit),
        question=Lengths(min(60, prompt.p50), min(200, prompt.p50)),
        output=out,
        questions_per_document=1.0 / (1.0 - req.prefix_reuse),
        open_documents=8,
        model=model,
    )


def _lengths(p50: int, p95: int, lo: int, hi: int) -> Lengths:
    p50 = max(p50, 1)
    return Lengths(p50, max(p95, p50), max(1, min(lo, p50)), max(hi, p95))


def _scaled(p50: int, p95: int, factor: float) -> Lengths:
    return Lengths(p50, max(p50, round(p95 * factor)))


def profile_workload(req: WorkloadReq, seed: int = 0) -> TrafficProfile:
    """Sample the workload's generator and characterize it."""
    workload = make_workload(req, req.name)
    run = workload.start(block_size=SAMPLE_BLOCK_SIZE, seed=seed, duration_s=1e9)
    prompt: list[int] = []
    cached: list[int] = []
    output: list[int] = []
    while len(prompt) < NUM_SAMPLES and run.next_arrival_s() < math.inf:
        request = run.pop_arrival()
        prompt.append(request.num_prompt_tokens)
        cached.append(request.num_ideal_cached_tokens)
        output.append(request.output_len)
        run.on_complete(request, request.arrival_s + NOMINAL_E2E_S)
    p = np.asarray(prompt, dtype=np.float64)
    longest = int(p.max())
    if req.max_prompt_tokens is not None and longest > req.max_prompt_tokens:
        # NOTE: agent sessions grow past any cap of ours (history plus tool outputs); the plan
        # used to raise the stated limit to the longest sampled prompt without a word.
        raise SpecError(
            f"workloads[{req.name}].max_prompt_tokens ({req.max_prompt_tokens:,}) is below the "
            f"longest prompt its sessions send ({longest:,} tokens, sampled from multi_turn "
            f"and output_tokens): raise max_prompt_tokens to at least {longest:,}, remove it, "
            "or shorten the sessions (max_turns, tool_output_tokens, system_prompt_tokens)"
        )
    ideal = np.asarray(cached, dtype=np.float64)
    o = np.asarray(output, dtype=np.float64)
    ideal_rate = float(ideal.sum() / p.sum())
    target = req.prefix_reuse if req.prefix_reuse > 0 else DEFAULT_CACHE_EFFICIENCY * ideal_rate
    scale = min(1.0, target / ideal_rate) if ideal_rate > 0 else 0.0
    shapes = Shapes(p, ideal * scale, o)
    traffic = req.traffic
    sessions = traffic.is_sessions
    shared, per_session, spread = _working_set(req, shapes)
    return TrafficProfile(
        name=req.name,
        kind=req.kind,
        shapes=shapes,
        ideal_hit_rate=ideal_rate,
        expected_hit_rate=float(shapes.cached.sum() / p.sum()),
        peak_rate_per_s=0.0 if sessions else traffic.rate_per_s("peak"),
        avg_rate_per_s=0.0 if sessions else traffic.rate_per_s("avg"),
        peak_sessions=traffic.sessions("peak") if sessions else 0,
        avg_sessions=traffic.sessions("avg") if sessions else 0,
        think_time_s=req.multi_turn.think_time_s if req.multi_turn else 0.0,
        working_set_shared_tokens=shared,
        working_set_per_session_tokens=per_session,
        working_set_spread_tokens=spread,
        arrival_cv2=1.0 / req.burstiness,
        max_prompt_tokens=max(max_prompt_tokens(req), longest),
    )


def _working_set(req: WorkloadReq, shapes: Shapes) -> tuple[float, float, float]:
    """(shared per replica, per live session, spread over replicas) reusable KV tokens."""
    if req.kind == "agent":
        mt = req.multi_turn
        assert mt is not None
        history = float(np.mean(shapes.prompt + shapes.output)) - mt.system_prompt_tokens
        return float(mt.num_apps * mt.system_prompt_tokens), max(history, 0.0), 0.0
    if req.kind == "longctx":
        return 0.0, 0.0, 8.0 * float(np.mean(shapes.prompt))
    return float(req.num_prefix_groups * req.shared_prefix_tokens), 0.0, 0.0

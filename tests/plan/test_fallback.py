"""A fallback pool is sized for one lost replica of its primary as finally planned.

The fallback's load is the workload's peak over the primary's replicas; the primary grows after
the search sized it (spare GPUs on owned nodes, `grow` after a simulator miss), so the fallback
must be sized from the primary's final count, not the one it had first.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from inhouse.plan.analytic import Stream
from inhouse.plan.planner import characterize
from inhouse.plan.search import Candidate, grow, search
from inhouse.plan.sizing import Sized, size_choice

from .plan_helpers import parse, small_requirements


def _with_fallback(**changes: Any) -> dict[str, Any]:
    data = small_requirements()
    data["workloads"][0]["models"]["fallback"] = "Llama-3.2-1B"
    data.update(changes)
    return data


def _fallback_rates(candidate: Candidate, peak_per_s: float) -> tuple[float, float]:
    """(the rate the fallback pool was sized for, the rate one lost primary replica carries)."""
    (primary,) = [p for p in candidate.pools if p.need.role != "fallback"]
    (fallback,) = [p for p in candidate.pools if p.need.role == "fallback"]
    (stream,) = fallback.need.streams
    return stream.profile.peak_rate_per_s, peak_per_s / primary.replicas


def test_a_grown_primary_resizes_its_fallback() -> None:
    requirements = parse(_with_fallback())
    profiles = characterize(requirements)
    result = search(requirements, profiles, requirements.planning)
    candidate = result.candidates[0]
    grown = grow(candidate, ["chat"], requirements, profiles, requirements.planning)
    assert grown is not None
    before = [p.replicas for p in candidate.pools if p.need.role != "fallback"]
    after = [p.replicas for p in grown.pools if p.need.role != "fallback"]
    assert after == [before[0] + 1]
    sized_for, implied = _fallback_rates(grown, profiles["chat"].peak_rate_per_s)
    assert sized_for == pytest.approx(implied, rel=1e-12)
    # The fallback pool is named as the grown primary's fallback.
    assert set(grown.fallbacks.values()) == {"chat-fallback"}


def test_spare_gpus_on_owned_nodes_resize_the_fallback() -> None:
    # One owned node of 8 GPUs: the 8B primary and the 1B fallback take 3 of them, and the
    # spare ones become primary replicas after the fallback was sized.
    owned = {"gpu": "h100_sxm", "pricing": "capex", "capex_usd_per_node": 250000, "max_nodes": 1}
    requirements = parse(_with_fallback(hardware=[owned]))
    profiles = characterize(requirements)
    result = search(requirements, profiles, requirements.planning)
    assert result.candidates
    for candidate in result.candidates:
        assert sum(p.num_gpus for p in candidate.pools) == 8
        sized_for, implied = _fallback_rates(candidate, profiles["chat"].peak_rate_per_s)
        assert sized_for == pytest.approx(implied, rel=1e-12), candidate.label


def test_each_candidate_sizes_its_fallback_for_its_own_primary() -> None:
    # Candidates differ in their primary's replica count; the sizing cache handed every one the
    # fallback sized for the first.
    data = _with_fallback()
    data["workloads"][0]["traffic"] = {"avg_per_s": 10.0, "peak_per_s": 20.0}
    data["workloads"][0]["models"].update(allowed=["Llama-3.3-70B"], fallback="Llama-3.1-8B")
    requirements = parse(data)
    profiles = characterize(requirements)
    result = search(requirements, profiles, requirements.planning)
    replicas = {p.replicas for c in result.candidates for p in c.pools if p.need.role != "fallback"}
    assert len(replicas) > 1
    for candidate in result.candidates:
        sized_for, implied = _fallback_rates(candidate, profiles["chat"].peak_rate_per_s)
        assert sized_for == pytest.approx(implied, rel=1e-12), candidate.label


def _split_workload(peak_per_s: float) -> dict[str, Any]:
    data = _with_fallback()
    workload = data["workloads"][0]
    workload.update(
        kind="longctx",
        traffic={"avg_per_s": peak_per_s / 4, "peak_per_s": peak_per_s},
        prompt_tokens={"p50": 6000, "p95": 24000},
        max_prompt_tokens=96000,
        shared_prefix_tokens=0,
        slo={"ttft_p95_ms": 2000, "tpot_p95_ms": 50},
    )
    workload["models"].update(allowed=["Llama-3.3-70B"], fallback="Llama-3.1-8B")
    data["planning"]["max_num_batched_tokens"] = [8192]
    return data


@pytest.mark.parametrize("peak_per_s", [12.0, 40.0])
def test_a_split_workload_sizes_its_fallback_for_one_lost_replica_of_either_part(
    peak_per_s: float,
) -> None:
    # Split at a prompt length, one lost replica sends the fallback its own part's traffic:
    # that part's prompts (the long ones from the long pool) at its share over its replicas,
    # held to its quantile. The fallback was sized for the whole workload's prompt mix at the
    # larger of those shares: at 40/s two replicas where one serves either loss.
    requirements = parse(_split_workload(peak_per_s))
    profiles = characterize(requirements)
    profile = profiles["chat"]
    result = search(requirements, profiles, requirements.planning)
    split = [c for c in result.candidates if any(p.need.role == "long" for p in c.pools)]
    assert split
    for candidate in split:
        parts = [p for p in candidate.pools if p.need.role != "fallback"]
        assert len(parts) == 2
        (fallback,) = [p for p in candidate.pools if p.need.role == "fallback"]
        (sized_for,) = fallback.need.streams
        assert any(np.array_equal(sized_for.shapes.prompt, p.need.streams[0].shapes.prompt)
                   for p in parts), "the fallback carries one part's prompts"  # fmt: skip
        needed = []
        for part in parts:
            (stream,) = part.need.streams
            lost = Stream(profile.scaled(load_factor=stream.share / part.replicas), stream.shapes)
            need = replace(fallback.need, streams=(lost,), quantiles=dict(part.need.quantiles))
            served = size_choice(need, fallback.choice, requirements.planning, 1.0)
            assert isinstance(served, Sized), f"{candidate.label}: {served}"
            needed.append(served.replicas)
        assert fallback.replicas == max(needed), candidate.label

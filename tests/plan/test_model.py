"""The analytic model's pieces: distributions, queues, and agreement with the engine."""

import numpy as np
import pytest

from inhouse.engine.build import ReplicaSpec, build_replica
from inhouse.plan.analytic import PoolModel, Stream, erlang_c
from inhouse.plan.dist import Dist, mix, normal_tail
from inhouse.plan.traffic import Shapes
from inhouse.predict import run_closed_loop
from inhouse.spec.knobs import EngineKnobs

from .plan_helpers import parse, small_requirements


def test_quantile_of_plain_atoms_is_the_weighted_quantile() -> None:
    dist = Dist.atoms([1.0, 2.0, 3.0, 4.0], [0.5, 0.3, 0.15, 0.05])
    assert dist.quantile(0.5) == 1.0
    assert dist.quantile(0.95) == 3.0
    assert dist.quantile(0.96) == 4.0


def test_wait_tail_is_rho_times_exponential() -> None:
    dist = Dist.atoms([0.0], None, wait_prob=0.5, wait_mean_s=2.0)
    assert dist.exceed(0.0) == pytest.approx(0.5)
    assert dist.exceed(2.0) == pytest.approx(0.5 * np.exp(-1.0))
    # p95: 0.5·exp(-t/2) = 0.05 -> t = 2·ln 10
    assert dist.quantile(0.95) == pytest.approx(2.0 * np.log(10.0), rel=1e-6)


def test_mixture_weights_parts_by_share() -> None:
    fast = Dist.atoms([1.0])
    slow = Dist.atoms([10.0])
    assert mix([(fast, 0.96), (slow, 0.04)]).quantile(0.95) == 1.0
    assert mix([(fast, 0.94), (slow, 0.06)]).quantile(0.95) == 10.0


def test_normal_tail() -> None:
    assert normal_tail(np.array([0.0]))[0] == pytest.approx(0.5)
    assert normal_tail(np.array([1.6448536]))[0] == pytest.approx(0.05, abs=1e-6)
    assert normal_tail(np.array([-1.6448536]))[0] == pytest.approx(0.95, abs=1e-6)


def test_erlang_c() -> None:
    assert erlang_c(1, 0.6) == pytest.approx(0.6)
    assert erlang_c(2, 0.5) == pytest.approx(1.0 / 3.0)
    assert erlang_c(4, 0.0) == 0.0
    assert erlang_c(3, 1.0) == 1.0


def _model(isl: int, rate: float) -> tuple[PoolModel, ReplicaSpec]:
    req = parse(small_requirements()).workloads[0]
    spec = ReplicaSpec(
        "Llama-3.1-8B", "h100_sxm", 1, "fp8", knobs=EngineKnobs(max_num_batched_tokens=2048)
    )
    from inhouse.plan.traffic import profile_workload

    profile = profile_workload(req)
    profile = profile.scaled(load_factor=rate / profile.peak_rate_per_s)
    shapes = Shapes(np.full(10, float(isl)), np.zeros(10), np.full(10, 2.0))
    return PoolModel(build_replica(spec), [Stream(profile, shapes)]), spec


@pytest.mark.parametrize("isl", [500, 6000])
def test_idle_ttft_equals_the_engine_closed_loop(isl: int) -> None:
    model, spec = _model(isl, 1.0)
    forecast = model.forecast(1e-4)
    engine = run_closed_loop(build_replica(spec), isl, 2, 1, num_requests=2, sampled_waves=None)
    assert forecast.streams["chat"].p95_ms("ttft") == pytest.approx(engine.mean_ttft_ms, rel=0.01)


def test_littles_law_batch() -> None:
    model, _ = _model(1000, 2.0)
    forecast = model.forecast(1.0)
    stream = forecast.streams["chat"]
    # B = λ · E[O] · t̄ (every output token is one step of the batch)
    assert forecast.batch == pytest.approx(
        stream.rate_per_s * 2.0 * forecast.mean_step_ms / 1000, rel=0.05
    )

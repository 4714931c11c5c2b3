"""The token budget as each engine settles it without chunked prefill."""

from __future__ import annotations

import pytest

from inhouse.engine.build import ReplicaSpec, build_replica
from inhouse.errors import SpecError
from inhouse.predict import run_closed_loop
from inhouse.spec.knobs import VLLM_SERVE_DEFAULTS

NO_CHUNKS = VLLM_SERVE_DEFAULTS.model_copy(
    update={"enable_chunked_prefill": False, "max_num_batched_tokens": 4096}
)


def test_vllm_refuses_a_budget_below_max_model_len_without_chunked_prefill() -> None:
    spec = ReplicaSpec("Llama-3.1-8B", "h100_sxm", 1, "fp8", "vllm", NO_CHUNKS)
    with pytest.raises(SpecError, match="max_num_batched_tokens"):
        build_replica(spec)


def test_sglang_keeps_its_budget_and_runs_a_longer_prompt_alone() -> None:
    """SGLang's prefill batches take a prompt longer than the budget on its own (its
    PrefillAdder admits the first request of a batch whatever its length)."""
    spec = ReplicaSpec("Llama-3.1-8B", "h100_sxm", 1, "fp8", "sglang", NO_CHUNKS)
    replica = build_replica(spec)
    assert replica.config.max_num_batched_tokens == 4096
    assert replica.config.max_model_len > 4096
    result = run_closed_loop(replica, 6000, 16, 2)
    assert result.num_requests > 0 and result.mean_ttft_ms > 0


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_a_static_memory_fraction_outside_0_1_is_refused_naming_the_field(
    fraction: float,
) -> None:
    """A passed `mem_fraction_static` of 0 was taken as "none passed" (SGLang's own rule
    ran instead), and one above 1 was blamed on the prefill budget."""
    spec = ReplicaSpec("Llama-3.1-8B", "h100_sxm", 1, "fp8", "sglang", VLLM_SERVE_DEFAULTS,
                       mem_fraction_static=fraction)  # fmt: skip
    with pytest.raises(SpecError, match=r"mem_fraction_static=.*\(0, 1\].*None"):
        build_replica(spec)


@pytest.mark.parametrize(("backend", "interval"), [("sglang", 0), ("sglang", -3), ("vllm", 30)])
def test_a_recv_interval_sglang_cannot_run_is_refused_naming_the_field(
    backend: str, interval: int
) -> None:
    spec = ReplicaSpec("Llama-3.1-8B", "h100_sxm", 1, "fp8", backend, VLLM_SERVE_DEFAULTS,
                       scheduler_recv_interval=interval)  # fmt: skip
    with pytest.raises(SpecError, match=r"scheduler_recv_interval="):
        build_replica(spec)


def test_sglangs_recv_interval_reaches_the_engine() -> None:
    spec = ReplicaSpec("Llama-3.1-8B", "h100_sxm", 1, "fp8", "sglang", VLLM_SERVE_DEFAULTS,
                       scheduler_recv_interval=30)  # fmt: skip
    assert build_replica(spec).config.recv_interval == 30
    assert build_replica(ReplicaSpec("Llama-3.1-8B")).config.recv_interval == 1


def test_a_recv_interval_is_taken_for_sglang_however_the_backend_is_spelled() -> None:
    """The engine table reads "SGLang" as SGLang; the interval's check refused it as not
    SGLang ("only SGLang skips receiving requests; SGLang takes them every step")."""
    spec = ReplicaSpec("Llama-3.1-8B", "h100_sxm", 1, "fp8", "SGLang", VLLM_SERVE_DEFAULTS,
                       scheduler_recv_interval=30)  # fmt: skip
    assert build_replica(spec).config.recv_interval == 30

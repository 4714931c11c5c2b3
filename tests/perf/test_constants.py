"""The step-time constants: one kernel set shared by the engines, no constant per GPU.

A prediction for a GPU must follow from its catalog entry and these constants alone; that is
what makes a prediction for hardware nobody here measured mean anything.
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from tests.support.scripts import load_script

from inhouse.engine.build import ReplicaSpec, build_replica
from inhouse.errors import SpecError
from inhouse.perf.constants import (
    KERNEL_FIELDS,
    EngineConstants,
    get_engine_constants,
    known_backends,
    load_engine_table,
)
from inhouse.predict import run_closed_loop
from inhouse.spec import catalog
from inhouse.spec.catalog import known_gpus

ROOT = Path(__file__).resolve().parents[2]


def _engines_yaml() -> dict[str, object]:
    text = resources.files("inhouse.perf").joinpath("data", "engines.yaml").read_text("utf-8")
    data: dict[str, object] = yaml.safe_load(text)
    return data


def test_kernel_constants_are_shared_by_every_engine() -> None:
    for name in KERNEL_FIELDS:
        values = {getattr(get_engine_constants(b), name) for b in known_backends()}
        assert len(values) == 1, name


def test_no_constant_names_or_depends_on_a_gpu() -> None:
    """No GPU name appears anywhere in the constants: not as a key, not inside a value (what
    the fit saw, `fitted_on` and `fitted_gpus`, names GPUs and is no constant)."""
    data = _engines_yaml()
    for block in data.values():
        assert isinstance(block, dict)
        for name in ("fitted_on", "fitted_gpus"):
            block.pop(name, None)
    body = yaml.safe_dump(data)
    for gpu in known_gpus():
        assert gpu not in body
    for field in dataclasses.fields(EngineConstants):
        if field.name != "fitted_gpus":
            assert "gpu" not in field.name and "h100" not in field.name


def test_engine_blocks_inherit_the_kernels_block() -> None:
    data = _engines_yaml()
    assert set(data) == {"kernels", *known_backends()}
    kernels = data["kernels"]
    assert isinstance(kernels, dict)
    kernels["eta_bw"] = 0.5
    table = load_engine_table(yaml.safe_dump(data))
    assert {c.eta_bw for c in table.values()} == {0.5}


@pytest.fixture
def clone_of_b200(monkeypatch: pytest.MonkeyPatch) -> str:
    """A GPU the constants have never heard of, with exactly B200's catalog figures."""
    table = dict(catalog._gpu_table())
    clone = table["b200_sxm"].model_copy(update={"name": "unseen_gpu", "display_name": "X"})
    table["unseen_gpu"] = clone
    monkeypatch.setattr(catalog, "_gpu_table", lambda: table)
    return "unseen_gpu"


@pytest.mark.parametrize(
    ("model", "quant", "backend", "extra"),
    [
        ("Llama-3.1-70B", "fp8", "vllm", {}),
        ("DeepSeek-R1", "fp4", "sglang", {"moe_ep": 4, "gemm_quant": "nvfp4"}),
    ],
)
def test_a_gpu_is_predicted_from_its_catalog_entry_alone(
    clone_of_b200: str, model: str, quant: str, backend: str, extra: dict[str, object]
) -> None:
    """Rename B200: the prediction is unchanged, so nothing keyed on the name entered it;
    change one catalog figure: it moves, so the figures did."""
    spec = ReplicaSpec(model, "b200_sxm", 4, quant, backend, **extra)  # type: ignore[arg-type]
    real = run_closed_loop(build_replica(spec), 1024, 64, 8)
    renamed = run_closed_loop(
        build_replica(dataclasses.replace(spec, gpu=clone_of_b200)), 1024, 64, 8
    )
    assert (renamed.mean_ttft_ms, renamed.mean_tpot_ms) == (real.mean_ttft_ms, real.mean_tpot_ms)
    table = catalog._gpu_table()
    table[clone_of_b200] = table[clone_of_b200].model_copy(update={"hbm_bw_tbps": 4.0})
    slower = run_closed_loop(
        build_replica(dataclasses.replace(spec, gpu=clone_of_b200)), 1024, 64, 8
    )
    assert slower.mean_tpot_ms > 1.2 * real.mean_tpot_ms


def _fit_script() -> ModuleType:
    return load_script("scripts/fit_calibration.py")


def test_fitted_gpus_are_the_gpus_of_the_rows_the_fit_uses() -> None:
    """engines.yaml's `fitted_gpus` is what the fit script selects from the corpus, by its
    own defaults (the corpus protocol the shipped constants were fitted under, no holdout),
    per engine: a change to the corpus or its reading that adds or drops a GPU fails here
    until the constants are refitted."""
    script = _fit_script()
    rows = script.select_rows(script.build_parser().parse_args([]))
    expected = script.fitted_gpus(rows)
    assert set(expected) == set(known_backends())
    for backend in known_backends():
        assert get_engine_constants(backend).fitted_gpus == tuple(expected[backend]), backend


def test_a_table_without_fitted_gpus_reads_as_unknown() -> None:
    # The harness candidate and the leave-one-GPU-out files predate the field.
    text = (ROOT / "data" / "calibration_harness" / "engines.yaml").read_text("utf-8")
    assert {c.fitted_gpus for c in load_engine_table(text).values()} == {None}


def test_fitted_gpus_that_are_not_a_list_of_names_are_refused_by_field() -> None:
    data = _engines_yaml()
    vllm = data["vllm"]
    assert isinstance(vllm, dict)
    vllm["fitted_gpus"] = "h100_sxm"
    with pytest.raises(SpecError, match=r"engine 'vllm': fitted_gpus 'h100_sxm' is not a list"):
        load_engine_table(yaml.safe_dump(data))

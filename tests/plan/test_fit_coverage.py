"""The plan says whether each GPU it chose was in the step-time constants' calibration."""

from __future__ import annotations

import dataclasses

import pytest

from inhouse.perf.constants import get_engine_constants
from inhouse.plan import build_report, make_plan
from inhouse.plan.fit_coverage import fit_coverage
from inhouse.plan.memo import render_memo

from .plan_helpers import parse, small_requirements

VLLM = get_engine_constants("vllm")


def test_a_gpu_among_the_fitted_ones_is_said_to_be_among_them() -> None:
    assert fit_coverage("vllm", VLLM, ["h100_sxm", "h100_sxm"]) == (
        "Calibration: the vllm step-time constants were fitted on NVIDIA B200 SXM 180GB "
        "and NVIDIA H100 SXM5 80GB runs; NVIDIA H100 SXM5 80GB is among them (in-sample "
        "errors: docs/perf-model.md, *Errors by group*)."
    )


def test_a_gpu_outside_the_calibration_is_named_with_what_to_do() -> None:
    line = fit_coverage("vllm", VLLM, ["h200_sxm"])
    assert line == (
        "Calibration: the vllm step-time constants were fitted on NVIDIA B200 SXM 180GB "
        "and NVIDIA H100 SXM5 80GB runs; NVIDIA H200 SXM 141GB is not among them: its latency "
        "forecasts are extrapolated from the GPU catalog's figures (held-out errors: "
        "docs/perf-model.md, *Errors by group*, leave-one-GPU-out and unseen GPUs); measure "
        "before you sign (inhouse bench on the hardware)."
    )


def test_of_two_chosen_gpus_only_the_one_outside_is_named() -> None:
    line = fit_coverage("vllm", VLLM, ["h100_sxm", "b300_sxm"])
    assert "; NVIDIA B300 SXM (Blackwell Ultra) 288GB is not among them: its latency" in line
    line = fit_coverage("vllm", VLLM, ["h200_sxm", "l40s"])
    assert "; NVIDIA H200 SXM 141GB and NVIDIA L40S 48GB are not among them: their" in line


def test_constants_that_do_not_record_their_gpus_say_so() -> None:
    unknown = dataclasses.replace(VLLM, fitted_gpus=None)
    line = fit_coverage("vllm", unknown, ["h100_sxm"])
    assert "do not record which GPUs they were fitted on" in line
    assert line.endswith("measure before you sign (inhouse bench on the hardware).")


@pytest.mark.parametrize(("gpu", "among"), [("h200_sxm", False), ("h100_sxm", True)])
def test_the_plan_json_and_the_memos_section_8_carry_it(gpu: str, among: bool) -> None:
    data = small_requirements()
    data["hardware"][0]["gpu"] = gpu
    report = build_report(make_plan(parse(data), verify=False), sensitivity=False)
    (line,) = [a for a in report["assumptions"] if a.startswith("Calibration:")]
    assert ("is among them" in line) is among
    assert ("is not among them" in line) is not among
    memo = render_memo(report, {})
    section = memo[memo.index("## 8. Risks and assumptions") :]
    assert f"* {line}" in section

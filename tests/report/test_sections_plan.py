"""Sections 2 and 5 against the render and the playbook: the weight cache holds the checkpoint
the playbook pulls, and the cold start is the load the startupProbe is sized for."""

from __future__ import annotations

import re
from pathlib import Path

from inhouse.render.layout import ENGINE_INIT_S, NVME_READ_BYTES_S, checkpoint_bytes
from inhouse.report.build import build_outputs
from inhouse.report.inputs import ReportInputs
from inhouse.spec.catalog import get_model
from inhouse.spec.load import load_stack


def test_weight_cache_and_cold_start_read_the_checkpoint_the_playbook_pulls(
    inputs: ReportInputs,
) -> None:
    """The playbook pulls the 16-bit checkpoint (an FP8 pool quantizes it at load) and sizes
    the startupProbe on reading it; section 2 sized the NVMe cache, and section 5 the cold
    start, on the FP8 weights in GPU memory: half the bytes, a budget the probe contradicted."""
    stack = load_stack(Path(inputs.stack.name))
    files = build_outputs(inputs, stack=stack).files
    doc = files["reference-architecture.md"].decode()
    playbook = files["deployment-playbook.md"].decode()
    models = {p["hf_id"] for p in inputs.plan.get("pools")}
    assert len(models) == 1
    (hf_id,) = models
    size = checkpoint_bytes(get_model(hf_id))
    assert f"({size / 1e9:.0f} GB checkpoint" in playbook
    section2 = doc.split("## 2. ")[1].split("\n## ")[0]
    assert f"Weight cache: at least {size / 1e9:,.0f} GB of NVMe per node" in section2
    section5 = doc.split("### Cold-start budget")[1].split("\n## ")[0]
    verify = -(-size // NVME_READ_BYTES_S)  # the init containers hash it first
    total = verify + size / NVME_READ_BYTES_S + ENGINE_INIT_S
    assert re.search(rf"about {total:,.0f} s from `kubectl apply` to first token", section5)
    assert f"{size / 1e9:,.0f} GB checkpoint" in section5


def test_the_planned_hit_rate_is_worded_as_the_planner_computes_it(inputs: ReportInputs) -> None:
    """The planner's rate is cached over prompt tokens of every request (plan/traffic.py), the
    measure vLLM's counters give; section 1 called it a rate "on turn 2 and later", which
    would be higher than the one measured against it."""
    from inhouse.report.document import build_document

    section = build_document(inputs).markdown.split("## 1. ")[1].split("\n## ")[0]
    assert "turn 2 and later" not in section
    assert "of the prompt tokens of every request (turn 1 included)" in section

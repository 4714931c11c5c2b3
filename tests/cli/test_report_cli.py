"""`inhouse report` end to end on files: every deliverable written, the render read back, bad
inputs named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openpyxl import load_workbook

from inhouse.cli.main import main

from ..report.report_fixtures import TENANTS, write_all

FILES = (
    "reference-architecture.md",
    "reference-architecture.html",
    "sizing-memo.md",
    "runbook.md",
    "deployment-playbook.md",
    "bench-report.md",
    "cost-sheet.xlsx",
    "cost-sheet.csv",
    "license-memo.md",
    "slo.png",
)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_all(tmp_path_factory.mktemp("cli-report"))


def _args(dirs: dict[str, Path], out: Path) -> list[str]:
    return [
        "report",
        "--plan",
        str(dirs["plan"]),
        "--bench",
        str(dirs["chat"].parent),  # a directory of runs
        "--drills",
        str(dirs["drills"]),
        "--out",
        str(out),
    ]


def test_writes_the_document_and_six_deliverables(
    dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    assert main(_args(dirs, out)) == 0
    for name in FILES:
        assert (out / name).stat().st_size > 0, name
    assert (out / "deploy" / "prometheus" / "rules.yaml").exists()  # rendered, then read
    assert (out / "drills" / "kill-replica-timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "](drills/kill-replica-timeline.png)" in (out / "reference-architecture.md").read_text()
    book = load_workbook(out / "cost-sheet.xlsx")
    assert any(str(c.value).startswith("=") for row in book["cost"].iter_rows() for c in row)
    playbook = (out / "deployment-playbook.md").read_text()
    assert "kubectl apply -f deploy/k8s/engine-chat.yaml" in playbook
    assert "inhouse check topology topo.txt" in playbook
    memo = (out / "license-memo.md").read_text()
    assert "Llama 3.3 Community License" in memo and "700 million" in memo
    assert "adapter utility" in memo
    runbook = (out / "runbook.md").read_text()
    assert "InhouseKVCacheFull" in runbook and "kill-replica" in runbook
    assert "reference architecture and six deliverables" in capsys.readouterr().out


def test_public_writes_the_sanitized_set(dirs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "public"
    assert main([*_args(dirs, out), "--public"]) == 0
    text = (out / "reference-architecture.md").read_text()
    assert "Public version" in text and "acme-support" not in text
    assert not (out / "slo.png").exists()
    names = [*TENANTS, json.loads((dirs["plan"] / "plan.json").read_text())["name"]]
    leaks = [
        (str(path.relative_to(out)), name)
        for path in sorted(out.rglob("*"))
        if path.is_file()
        for name in names
        if name.encode() in path.read_bytes()
    ]
    assert leaks == []  # no file in OUT names a tenant or the customer: OUT is what is published
    assert not (out / "deploy").exists()


def test_a_plan_dir_without_plan_json_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dirs: dict[str, Path]
) -> None:
    empty = tmp_path / "plan"
    empty.mkdir()
    (empty / "stack.yaml").write_text((dirs["plan"] / "stack.yaml").read_text())
    assert main(["report", "--plan", str(empty), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "plan.json not found" in err and "inhouse plan" in err
    assert not (tmp_path / "o").exists()  # a refused run leaves nothing behind


def test_malformed_drill_evidence_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dirs: dict[str, Path]
) -> None:
    drills = tmp_path / "drills" / "kv-fill"
    drills.mkdir(parents=True)
    (drills / "evidence.json").write_text(json.dumps({"drill": "kv-fill"}))
    args = [
        "report",
        "--plan",
        str(dirs["plan"]),
        "--drills",
        str(drills.parent),
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(args) == 2
    assert "not drill evidence" in capsys.readouterr().err
    # Refused after the plan's stack was rendered: OUT/deploy was written, then the refusal.
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("missing", ["stack.yaml", "the directory"])
def test_a_plan_dir_without_stack_yaml_is_named_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dirs: dict[str, Path], missing: str
) -> None:
    """It said "cannot read stack file ...: No such file or directory", no word of the fix."""
    plan = tmp_path / "plan"
    if missing == "stack.yaml":
        plan.mkdir()
        (plan / "plan.json").write_text((dirs["plan"] / "plan.json").read_text())
    assert main(["report", "--plan", str(plan), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{plan / 'stack.yaml'} not found" in err
    assert f"run `inhouse plan REQUIREMENTS --out {plan}` first" in err
    assert not (tmp_path / "o").exists()


def test_a_missing_mermaid_js_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dirs: dict[str, Path]
) -> None:
    out = tmp_path / "o"
    missing = tmp_path / "mermaid.min.js"
    assert main([*_args(dirs, out), "--mermaid-js", str(missing)]) == 2
    assert f"--mermaid-js {missing}: no such file" in capsys.readouterr().err
    assert not out.exists()


def test_an_out_that_is_a_file_is_refused_with_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dirs: dict[str, Path]
) -> None:
    out = tmp_path / "o"
    out.write_text("notes")
    assert main(_args(dirs, out)) == 2
    err = capsys.readouterr().err
    assert f"--out {out}" in err and "not a directory" in err, err
    assert out.read_text() == "notes"

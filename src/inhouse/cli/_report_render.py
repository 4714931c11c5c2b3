"""Reads `inhouse report --render DIR` (the I/O edge): every text file `inhouse render` wrote,
the rules and dashboards the report reads checked, so a cut or hand-edited one is named with the
fix, not a traceback or a section 6 gone quiet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from inhouse.errors import SpecError
from inhouse.report.inputs import RenderOutput
from inhouse.report.rendered import RULES_FILE

RENDER_AGAIN = "run `inhouse render STACK --out DIR` again (never edit what it wrote)"


def _objects(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


def _check_rules(text: str, where: Path) -> None:
    """prometheus/rules.yaml as the report reads it: groups of rules, each rule an object whose
    labels and annotations are objects."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{where}: not valid YAML ({what}{at}); {RENDER_AGAIN}") from None
    if not isinstance(data, dict) or "groups" not in data:
        raise SpecError(
            f"{where}: not a Prometheus rules file (an object with `groups`); {RENDER_AGAIN}"
        )
    if not _objects(data["groups"]):
        raise SpecError(f"{where}: `groups` is not a list of objects; {RENDER_AGAIN}")
    for g, group in enumerate(data["groups"]):
        rules = group.get("rules") or []
        if not _objects(rules):
            raise SpecError(
                f"{where}: `groups[{g}].rules` is not a list of objects; {RENDER_AGAIN}"
            )
        for r, rule in enumerate(rules):
            for key in ("labels", "annotations"):
                if rule.get(key) is not None and not isinstance(rule[key], dict):
                    raise SpecError(
                        f"{where}: `groups[{g}].rules[{r}].{key}` is not an object; {RENDER_AGAIN}"
                    )


def _check_dashboard(text: str, where: Path) -> None:
    try:
        board = json.loads(text)
    except ValueError as exc:
        raise SpecError(f"{where}: not valid JSON ({exc}); {RENDER_AGAIN}") from None
    if isinstance(board, dict) and "panels" in board and not _objects(board["panels"]):
        raise SpecError(f"{where}: `panels` is not a list of objects; {RENDER_AGAIN}")


def load_render(path: Path) -> RenderOutput:
    """Every text file `inhouse render` wrote, the rules and dashboards the report reads
    checked: a cut or hand-edited one is named, not a traceback or a section gone quiet."""
    if not path.is_dir():
        raise SpecError(f"--render {path}: no such directory; run `inhouse render STACK --out DIR`")
    files = {}
    for file in sorted(path.rglob("*")):
        if file.is_file():
            try:
                files[file.relative_to(path).as_posix()] = file.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
    if RULES_FILE not in files:
        raise SpecError(
            f"--render {path}: no {RULES_FILE} in it, so not what `inhouse render` writes; "
            "run `inhouse render STACK --out DIR` and pass that DIR"
        )
    _check_rules(files[RULES_FILE], path / RULES_FILE)
    for relative, text in files.items():
        if relative.startswith("grafana/") and relative.endswith(".json"):
            _check_dashboard(text, path / relative)
    return RenderOutput(str(path), files)

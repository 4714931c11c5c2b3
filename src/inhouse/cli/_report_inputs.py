"""Reads what `inhouse report` is built from into `ReportInputs` (the I/O edge of the report).

* `--plan DIR`: `plan.json`, `stack.yaml`, and `compare.json` when `plan --compare` wrote one;
* `--bench DIR` (repeatable): a run (`result.json`, `requests.jsonl`) or a directory of runs;
* `--drills DIR`: `summary.json` and `NAME/evidence.json` (+ `report.md`, a timeline PNG);
* `--render DIR`: every text file `inhouse render` wrote.

A missing or malformed file is a `SpecError` naming the file and what to run to make it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from inhouse.errors import SpecError
from inhouse.report.inputs import BenchRun, Doc, DrillRun, Drills, RenderOutput, ReportInputs


def _json(path: Path, hint: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{path} not found; {hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path} is not valid JSON ({exc}); {hint}") from None


def _jsonl(path: Path) -> tuple[dict[str, Any], ...]:
    if not path.exists():
        return ()
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}:{number}: not a JSON line ({exc})") from None
    return tuple(rows)


def load_bench(path: Path) -> list[BenchRun]:
    hint = "run `inhouse bench ... --out DIR` and pass that DIR"
    if (path / "result.json").exists():
        result = _json(path / "result.json", hint)
        if not isinstance(result, dict):
            raise SpecError(f"{path / 'result.json'}: not a bench result (a JSON object)")
        requests = path / "requests.jsonl"
        return [
            BenchRun(
                path.name, Doc(str(path / "result.json"), result), _jsonl(requests), str(requests)
            )
        ]
    if not path.is_dir():
        raise SpecError(f"--bench {path}: no such directory; {hint}")
    runs = [r for child in sorted(path.iterdir()) if child.is_dir() for r in load_bench(child)]
    if not runs:
        raise SpecError(f"--bench {path}: no result.json in it or its subdirectories; {hint}")
    return runs


def load_drills(path: Path, images: dict[str, bytes]) -> Drills:
    hint = "run `inhouse drill run all --out DIR` and pass that DIR"
    if not path.is_dir():
        raise SpecError(f"--drills {path}: no such directory; {hint}")
    summary = path / "summary.json"
    runs = []
    for child in sorted(path.iterdir()):
        evidence = child / "evidence.json"
        if not evidence.exists():
            continue
        data = _json(evidence, hint)
        if not isinstance(data, dict) or "checks" not in data:
            raise SpecError(f"{evidence}: not drill evidence (needs `drill`, `verdict`, `checks`)")
        report = child / "report.md"
        timeline = next(iter(sorted(child.glob("*.png"))), None)
        linked = None
        if timeline is not None:
            linked = f"drills/{child.name}-{timeline.name}"
            images[linked] = timeline.read_bytes()
        runs.append(
            DrillRun(
                child.name,
                Doc(str(evidence), data),
                report.read_text(encoding="utf-8") if report.exists() else None,
                linked,
            )
        )
    if not runs:
        raise SpecError(f"--drills {path}: no NAME/evidence.json in it; {hint}")
    return Drills(
        str(path),
        Doc(str(summary), _json(summary, hint)) if summary.exists() else None,
        tuple(runs),
    )


def load_render(path: Path) -> RenderOutput:
    if not path.is_dir():
        raise SpecError(f"--render {path}: no such directory; run `inhouse render STACK --out DIR`")
    files = {}
    for file in sorted(path.rglob("*")):
        if file.is_file():
            try:
                files[file.relative_to(path).as_posix()] = file.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
    return RenderOutput(str(path), files)


def load_inputs(
    plan_dir: Path, benches: list[Path], drills: Path | None, render: RenderOutput | None
) -> ReportInputs:
    hint = f"run `inhouse plan REQUIREMENTS --out {plan_dir}` first"
    plan = _json(plan_dir / "plan.json", hint)
    if not isinstance(plan, dict) or "requirements" not in plan:
        raise SpecError(
            f"{plan_dir / 'plan.json'}: written by an older `inhouse plan` (no `requirements` "
            f"key); {hint.replace('first', 'again')}"
        )
    try:
        stack = yaml.safe_load((plan_dir / "stack.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"{plan_dir / 'stack.yaml'}: {exc}; {hint}") from None
    compare_path = plan_dir / "compare.json"
    images: dict[str, bytes] = {}
    return ReportInputs(
        plan=Doc(str(plan_dir / "plan.json"), plan),
        stack=Doc(str(plan_dir / "stack.yaml"), stack),
        benches=tuple(r for b in benches for r in load_bench(b)),
        drills=load_drills(drills, images) if drills else None,
        render=render,
        compare=Doc(str(compare_path), _json(compare_path, hint))
        if compare_path.exists()
        else None,
        images=images,
    )

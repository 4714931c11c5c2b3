"""plan.json, tampered field by field: every field the report reads is refused with its JSON
path, what it should be and the fix, never a traceback; and the schema covers what the report
reads (recorded while it builds every file)."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from inhouse.cli._report_inputs import load_plan
from inhouse.cli.main import main
from inhouse.errors import SpecError
from inhouse.report.build import build_outputs
from inhouse.report.inputs import Doc, PathPart, ReportInputs, path_text
from inhouse.report.plan_schema import KINDS, PLAN_FIELDS, Field, pattern

from .conftest import make_inputs

NUMERIC = {"count", "positive", "number", "fraction"}
LISTS = {"names", "counts"}  # a field whose items the report reads as the field's own
TEXTS = {"text", "name", "model", "quant", "pricing", "simulate"}


@pytest.fixture(scope="module")
def full_plan(report_dirs: dict[str, Path]) -> dict[str, Any]:
    """The CRM plan as `inhouse plan` wrote it, with an item in each list it leaves empty (no
    sensitivity run in the fixture, no failed verification or rejected layout), so every
    field of the schema is there to tamper with; the degraded SLO of a workload the example
    states none for gets the metrics its chat one leaves out."""
    plan: dict[str, Any] = json.loads((report_dirs["plan"] / "plan.json").read_text())
    plan["degraded"][0]["degraded_slo"]["utility"] = {
        "tpot": {"target_ms": 90.0, "alarm_ms": 120.0},
        "e2e": {"target_ms": 3000.0, "alarm_ms": 4000.0},
    }
    plan["sensitivity"] = [{"name": "prefix_hit_halved", "breaks_at_size": 0.5}]
    search = plan["search"]
    search["failed_verification"] = [{**search["runners_up"][0], "round": 1}]
    search["rejected_layouts"] = [{"layout": "utility on its own pool", "why": ["no GPU left"]}]
    return plan


def _places(data: Any, parts: tuple[str, ...]) -> Iterator[list[PathPart]]:
    if not parts:
        yield []
        return
    head, rest = parts[0], parts[1:]
    if head == "[]" and isinstance(data, list):
        keys: list[PathPart] = list(range(len(data)))
    elif head == "*" and isinstance(data, dict):
        keys = list(data)
    elif isinstance(data, dict) and head in data:
        keys = [head]
    else:
        return
    for key in keys:
        for below in _places(data[key], rest):
            yield [key, *below]


def _first_place(plan: dict[str, Any], field: Field) -> list[PathPart]:
    """Where the field first stands in the plan, with a value that is not null if it can."""
    places = list(_places(plan, pattern(field.path)))
    for where in sorted(places, key=lambda w: _at(plan, w) is None):
        return where
    raise AssertionError(f"{field.path} is in no place of the full plan: the test is vacuous")


def _at(data: Any, where: list[PathPart]) -> Any:
    for part in where:
        data = data[part]
    return data


def _mutations(field: Field) -> list[tuple[str, Any]]:
    """(what, the value put in its place); `...` deletes the key."""
    wrong: Any = 12 if field.kind in TEXTS else "12" if field.kind in NUMERIC else "x"
    out: list[tuple[str, Any]] = [("wrong type", wrong)]
    if field.required:
        out.append(("missing", ...))
    if not field.nullable:
        out.append(("null", None))
    if field.kind in NUMERIC:
        out += [("negative", -2), ("NaN", math.nan), ("Infinity", math.inf)]
    extra = {
        "count": 2.5,
        "positive": 0,
        "fraction": 1.5,
        "pools": [],
        "names": ["chat", ""],
        "counts": [0, -1],
        "metrics": {"p99": {"target_ms": 1.0, "alarm_ms": 2.0}},
        "traffic": {"avg_per_s": 1.0},
        "model": "no-such/model",
        "quant": "int3-magic",
        "pricing": "leased",
        "simulate": "inhouse simulate --stack stack.yaml --workload",
    }
    if field.kind in extra:
        out.append((f"out of range for {field.kind}", extra[field.kind]))
    return out


CASES = [(f, what, value) for f in PLAN_FIELDS for what, value in _mutations(f)]


@pytest.mark.parametrize(
    ("field", "what", "value"), CASES, ids=[f"{f.path}-{w}" for f, w, _ in CASES]
)
def test_a_tampered_field_is_named_with_the_fix(
    full_plan: dict[str, Any], tmp_path: Path, field: Field, what: str, value: Any
) -> None:
    plan = copy.deepcopy(full_plan)
    where = _first_place(plan, field)
    parent = _at(plan, where[:-1])
    if value is ...:
        del parent[where[-1]]
    else:
        parent[where[-1]] = value
    (tmp_path / "plan.json").write_text(json.dumps(plan))  # NaN, Infinity as JSON's readers write
    with pytest.raises(SpecError) as err:
        load_plan(tmp_path)
    message = str(err.value)
    fix = f"run `inhouse plan REQUIREMENTS --out {tmp_path}` again (never edit plan.json)"
    assert message.endswith(fix)
    if field.path == "requirements" and value is ...:
        assert "written by an older `inhouse plan`" in message
        return
    expected = f"{tmp_path / 'plan.json'}: {path_text(where)}: expected {KINDS[field.kind][0]}"
    assert message.startswith(expected), message
    got = "nothing (the key is missing)" if value is ... else json.dumps(value)
    assert f", got {got}" in message


def test_the_example_error(full_plan: dict[str, Any], tmp_path: Path) -> None:
    plan = copy.deepcopy(full_plan)
    plan["pools"][0]["replicas"] = -2
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(SpecError) as err:
        load_plan(tmp_path)
    assert str(err.value).startswith(
        f"{tmp_path / 'plan.json'}: pools[0].replicas: expected a positive integer, got -2; "
    )


def test_nan_outside_the_fields_read_is_named_too(
    full_plan: dict[str, Any], tmp_path: Path
) -> None:
    plan = copy.deepcopy(full_plan)
    plan["pools"][0]["at_peak"]["decode_step_ms"] = math.nan  # not read by the report
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(SpecError, match=r"pools\[0\]\.at_peak\.decode_step_ms: expected a finite"):
        load_plan(tmp_path)


def test_the_cli_says_it_and_exits_2(
    report_dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    plan = json.loads((report_dirs["plan"] / "plan.json").read_text())
    plan["pools"][0]["tp"] = "two"
    (plan_dir / "plan.json").write_text(json.dumps(plan))
    (plan_dir / "stack.yaml").write_text((report_dirs["plan"] / "stack.yaml").read_text())
    assert main(["report", "--plan", str(plan_dir), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert 'pools[0].tp: expected a positive integer, got "two"' in err
    assert "Traceback" not in err


# --- the schema covers what the report reads ---


class _Dict(dict[str, Any]):
    """A plan object that records every key read from it (as a path) in `seen`."""

    def __init__(self, data: dict[str, Any], where: tuple[PathPart, ...], seen: set[Any]):
        super().__init__(data)
        self.where, self.seen = where, seen

    def _child(self, key: str, value: Any) -> Any:
        self.seen.add((*self.where, key))
        return _wrap(value, (*self.where, key), self.seen)

    def __getitem__(self, key: str) -> Any:
        return self._child(key, super().__getitem__(key))

    def get(self, key: str, default: Any = None) -> Any:
        self.seen.add((*self.where, key))
        return self._child(key, super().__getitem__(key)) if key in self.keys() else default

    def __contains__(self, key: object) -> bool:
        self.seen.add((*self.where, key))
        return key in self.keys()

    def items(self) -> Any:
        return [(k, self._child(k, v)) for k, v in super().items()]

    def values(self) -> Any:
        return [self._child(k, v) for k, v in super().items()]


class _List(list[Any]):
    def __init__(self, data: list[Any], where: tuple[PathPart, ...], seen: set[Any]):
        super().__init__(data)
        self.where, self.seen = where, seen

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return _List(super().__getitem__(index), self.where, self.seen)
        self.seen.add((*self.where, 0))
        return _wrap(super().__getitem__(index), (*self.where, 0), self.seen)

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            self.seen.add((*self.where, 0))
            yield _wrap(item, (*self.where, 0), self.seen)


def _wrap(value: Any, where: tuple[PathPart, ...], seen: set[Any]) -> Any:
    if isinstance(value, dict):
        return _Dict(value, where, seen)
    if isinstance(value, list):
        return _List(value, where, seen)
    return value


def _matches(parts: tuple[str, ...], path: tuple[PathPart, ...]) -> bool:
    return len(parts) == len(path) and all(
        p == "[]" if isinstance(k, int) else p in ("*", k) for p, k in zip(parts, path, strict=True)
    )


def _covered(path: tuple[PathPart, ...]) -> bool:
    """A field of the schema, a parent of one, or an item of a list-valued field."""
    for field in PLAN_FIELDS:
        parts = pattern(field.path)
        if len(parts) >= len(path) and _matches(parts[: len(path)], path):
            return True
        if field.kind in LISTS and _matches(parts, path[: len(parts)]):
            return True
    return False


def test_the_schema_covers_every_field_the_report_reads(
    report_dirs: dict[str, Path], full_plan: dict[str, Any]
) -> None:
    """Every key and index of plan.json that building every file (internal and public) reads."""
    seen: set[Any] = set()
    base = make_inputs(report_dirs)
    inputs: ReportInputs = replace(
        base, plan=Doc(base.plan.name, _wrap(copy.deepcopy(full_plan), (), seen))
    )
    build_outputs(inputs)
    build_outputs(inputs, public=True)
    assert ("pools", 0, "replicas") in seen and ("cost", "usd_per_hour") in seen
    uncovered = sorted(path_text(p) for p in seen if not _covered(p))
    assert uncovered == []


def test_every_field_s_parent_is_checked_before_it() -> None:
    """A child is checked only where its parent is an object or list: a parent left out of the
    schema would let a wrong one through unnamed."""
    earlier: set[tuple[str, ...]] = set()
    for field in PLAN_FIELDS:
        parts = pattern(field.path)
        assert len(parts) == 1 or parts[:-1] in earlier, field.path
        earlier.add(parts)

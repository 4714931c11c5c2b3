"""What the report is built from, as values: parsed files with the names they are cited by.

The CLI reads the files (`inhouse.cli._report_inputs`); everything here is pure. A `Doc` is one
parsed JSON or YAML file; `Doc.figure(...)` looks a value up by a path of keys and indices and
returns it as a `Figure` that cites the file and the path, or None when it is not there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inhouse.report.figures import Figure, Kind, Source, Unit

PathPart = str | int
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def path_text(parts: Sequence[PathPart]) -> str:
    """`["cost", "api_usd_per_month", "gpt-4.1-class"]` ->
    `cost.api_usd_per_month["gpt-4.1-class"]`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


_TOKEN = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_]*)|\[(-?\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def parse_path(text: str) -> list[PathPart]:
    """The inverse of `path_text`: `cost.api_usd_per_month["gpt-4.1-class"]` -> its parts."""
    parts: list[PathPart] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"not a JSON path: {text!r} (at {pos})")
        key, index, quoted = match.groups()
        parts.append(
            key if key is not None else int(index) if index is not None else json.loads(quoted)
        )
        pos = match.end()
    return parts


@dataclass(frozen=True)
class Doc:
    """One parsed file. `name` is how the document cites it (relative to the inputs)."""

    name: str
    data: Any

    def get(self, *parts: PathPart) -> Any:
        value = self.data
        for part in parts:
            if isinstance(part, int):
                if not isinstance(value, list) or not -len(value) <= part < len(value):
                    return None
            elif not isinstance(value, Mapping) or part not in value:
                return None
            value = value[part]
        return value

    def figure(
        self,
        *parts: PathPart,
        kind: Kind,
        unit: Unit = "",
        label: str = "",
        scale: float = 1.0,
        digits: int | None = None,
    ) -> Figure | None:
        value = self.get(*parts)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return Figure(
            float(value) * scale, unit, kind, Source(self.name, path_text(parts)), label, digits
        )


@dataclass(frozen=True)
class BenchRun:
    """One `inhouse bench --out DIR`: result.json and the rows of requests.jsonl."""

    name: str
    result: Doc
    requests: tuple[Mapping[str, Any], ...]
    requests_file: str

    @property
    def label(self) -> str:
        return str(self.result.get("label") or "")

    @property
    def model(self) -> str:
        return str(self.result.get("model_id") or "")

    def workload(self, names: Sequence[str]) -> str | None:
        """The plan workload this run measured: its `--label` (less a `-cold` suffix) or the
        model it requested, when either is a workload's name."""
        for candidate in (self.label.removesuffix("-cold"), self.model):
            if candidate in names:
                return candidate
        return None

    @property
    def is_cold_probe(self) -> bool:
        """A run labelled `W-cold` only measures cold-prefix TTFT for workload W."""
        return self.label.endswith("-cold")


# The seven drills, by `inhouse drill`'s names, with what each breaks.
DRILLS = (
    ("kill-replica", "Kill a chat replica during peak load"),
    ("kv-fill", "Fill the KV cache to 95%"),
    ("long-prompt-dos", "Long-prompt DoS from one tenant"),
    ("bad-signature", "Corrupted model signature"),
    ("load-not-ready", "Model loaded but not ready"),
    ("ecc-dbe", "GPU ECC double-bit error"),
    ("soak", "Soak: regression on p95 and prefix hit rate"),
)


@dataclass(frozen=True)
class DrillRun:
    """One drill's `DIR/NAME/`: evidence.json, and its report.md and timeline when present."""

    name: str
    evidence: Doc
    report_md: str | None = None
    timeline_file: str | None = None


@dataclass(frozen=True)
class Drills:
    directory: str
    summary: Doc | None
    runs: tuple[DrillRun, ...]

    def run(self, name: str) -> DrillRun | None:
        for run in self.runs:
            if run.name == name or run.evidence.get("drill") == name:
                return run
        return None


@dataclass(frozen=True)
class RenderOutput:
    """What `inhouse render` wrote, path -> text, and where (`directory`)."""

    directory: str
    files: Mapping[str, str]


@dataclass(frozen=True)
class ReportInputs:
    plan: Doc
    stack: Doc
    benches: tuple[BenchRun, ...] = ()
    drills: Drills | None = None
    render: RenderOutput | None = None
    compare: Doc | None = None
    images: Mapping[str, bytes] = field(default_factory=dict)  # files the document links

    @property
    def workload_names(self) -> tuple[str, ...]:
        return tuple((self.plan.get("workloads") or {}).keys())

    def runs_for(self, workload: str, *, cold: bool | None = False) -> list[BenchRun]:
        names = self.workload_names
        return [
            run
            for run in self.benches
            if run.workload(names) == workload and (cold is None or run.is_cold_probe == cold)
        ]

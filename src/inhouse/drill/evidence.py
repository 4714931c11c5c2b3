"""What a drill keeps: checks, alerts, the timeline, and the files written from them.

Per drill, `DIR/NAME/evidence.json` has `drill`, `verdict` (`pass` only when every check is
ok), `checks` (`name`, `expected`, `observed`, `ok`), `alerts` (`name`, `severity`, `fired_s`,
`resolved_s`, `received_by_alertmanager`), `prometheus` (`version`, `rules_file`,
`time_scale`), `started`, `duration_s`, `stack`; and, for the timeline and the post-mortem,
`events` (each fault and action, `t_s` and `what`) and `samples` (one per request the drill
sent: when it left and ended, TTFT, and whether and how it failed). Times `_s` are seconds
from the drill's start.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    expected: str
    observed: str
    ok: bool


@dataclass(frozen=True, slots=True)
class AlertRecord:
    """An alert the drill looked for: `received_by_alertmanager` means a notification of it
    reached the drill's receiver through Alertmanager (`fired_s` when it did)."""

    name: str
    severity: str
    fired_s: float | None
    resolved_s: float | None
    received_by_alertmanager: bool
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Event:
    t_s: float
    what: str


@dataclass(frozen=True, slots=True)
class Sample:
    """One request the drill sent: `t_s` when it left, `end_s` when it ended; `ttft_s` None
    when no token came; `error` empty on success, else `before-stream`, `mid-stream` or
    `rejected-4xx`."""

    t_s: float
    ttft_s: float | None
    error: str
    status: int
    end_s: float | None = None


@dataclass
class DrillResult:
    drill: str
    started: str
    stack: str
    checks: list[Check] = field(default_factory=list)
    alerts: list[AlertRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    prometheus: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "pass" if self.checks and all(c.ok for c in self.checks) else "fail"

    @property
    def failed_checks(self) -> list[str]:
        return [c.name for c in self.checks if not c.ok]

    def check(self, name: str, expected: str, observed: str, ok: bool) -> bool:
        self.checks.append(Check(name, expected, observed, bool(ok)))
        return bool(ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "drill": self.drill,
            "verdict": self.verdict,
            "checks": [asdict(c) for c in self.checks],
            "alerts": [asdict(a) for a in self.alerts],
            "prometheus": self.prometheus,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "stack": self.stack,
            "events": [asdict(e) for e in self.events],
            "samples": [asdict(s) for s in self.samples],
            "notes": self.notes,
        }


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")

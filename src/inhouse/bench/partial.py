"""What an unfinished run measured: the summary of the journal (`requests.jsonl.partial`) a run
killed or crashed before its reports leaves behind, for `inhouse bench report --partial DIR`.

The rows hold what `requests.jsonl` holds (`records.request_row`), so the summary is the one a
finished run's `result.json` carries (`metrics.summarize`), less what only the run itself knew:
the server's /metrics, the client's health, the first-content times, the SLOs it was given. It
says everywhere that the run did not finish: the duration is the span the rows cover (to the end
of the last request that ended), and the requests of about the last second before the kill are
missing. Nothing is written to the run directory: `inhouse bench compare` and `inhouse report`
go on refusing the run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inhouse.bench.failures import count_reasons
from inhouse.bench.metrics import Outcome, RequestResult, summarize
from inhouse.bench.records import PARTIAL_FILE
from inhouse.errors import SpecError

MS = 1000.0


@dataclass(frozen=True, slots=True)
class PartialRun:
    """The requests a journal holds, and the lines it held that were no row (the last one, cut
    off mid-row by the kill)."""

    path: Path
    results: list[RequestResult]
    num_bad_lines: int

    @property
    def span_s(self) -> float:
        """From the run's start to the end of the last request recorded."""
        return max((r.outcome.t_done for r in self.results), default=0.0)


def read_partial(run_dir: Path) -> PartialRun:
    path = run_dir / PARTIAL_FILE
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        raise SpecError(
            f"{run_dir}: no {PARTIAL_FILE}, so no unfinished run there (a finished one has "
            f"result.json: drop --partial)"
        ) from None
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror or exc}") from None
    results: list[RequestResult] = []
    bad = 0
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        result = _result(index, line)
        if result is None:
            bad += 1
        else:
            results.append(result)
    return PartialRun(path, results, bad)


def _result(index: int, line: bytes) -> RequestResult | None:
    """One journal row as the request's result; None for a line that is not a whole row."""
    try:
        row = json.loads(line)
        t_send = float(row["t_send_s"])
        latency_s = float(row["e2el_ms"]) / MS
        outcome = Outcome(
            index,
            float(row["t_sched_s"]),
            t_send=t_send,
            success=bool(row["success"]),
            error=str(row.get("error") or ""),
            ttft_s=float(row["ttft_ms"]) / MS,
            latency_s=latency_s,
            itl_s=[float(g) / MS for g in row.get("itl_ms") or ()],
            completion_tokens=int(row.get("output_len") or 0),
            prompt_tokens=row.get("input_len_server"),
            cached_tokens=row.get("cached_tokens"),
            t_done=t_send + latency_s,
        )
        return RequestResult(
            outcome,
            str(row["request_id"]),
            int(row.get("input_len_client") or 0),
            int(row.get("ideal_cached_tokens") or 0),
            session_key=row.get("session"),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def summarize_partial(run: PartialRun, percentiles: Sequence[float]) -> dict[str, Any]:
    """The run's figures, as far as the journal goes, marked unfinished."""
    out: dict[str, Any] = {
        "unfinished": True,
        "journal": str(run.path),
        "num_prompts": len(run.results),
        "num_bad_lines": run.num_bad_lines,
    }
    out.update(summarize(run.results, run.span_s, percentiles))
    for name in ("ttft_content", "itl_per_token"):  # the journal does not keep these
        for key in [k for k in out if k.endswith(f"_{name}_ms")]:
            del out[key]
    for key in ("ttft_role_chunk_artifact", "output_tokens_source"):
        out.pop(key, None)
    out["errors"] = count_reasons(r.outcome.error for r in run.results if not r.success)
    out["run"] = {"percentiles": list(percentiles), "interrupted": True}
    return out


def headline(summary: dict[str, Any], run_dir: Path) -> list[str]:
    """What the console says first: this run did not finish, and what the figures cover."""
    bad = summary["num_bad_lines"]
    cut = f"; {bad} line(s) that were no whole row (cut off by the kill) left out" if bad else ""
    return [
        f"UNFINISHED RUN: {run_dir} did not finish (killed or crashed before its reports were "
        "written); no result.json, and `inhouse bench compare` refuses it.",
        f"Figures from {summary['journal']}: the {summary['num_prompts']} request(s) recorded in "
        f"the first {summary['duration']:.1f} s (the last second or so before it stopped is "
        f"missing{cut}); the duration and throughputs are over that span.",
    ]

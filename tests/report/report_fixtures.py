"""Inputs for the report's tests: the CRM plan (short simulator checks), bench runs and drill
evidence written in exactly the schemas `inhouse bench` and `inhouse drill` write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from inhouse.plan import build_report, make_plan, parse_requirements
from inhouse.spec.stack import dump_stack

ROOT = Path(__file__).resolve().parents[2]
TENANTS = ("acme-support", "globex-batch")
CHAT_WINDOW = (1_800_000_000.0, 1_800_000_041.0)  # Unix seconds
DRILL_NAMES = (
    "kill-replica",
    "kv-fill",
    "long-prompt-dos",
    "bad-signature",
    "load-not-ready",
    "ecc-dbe",
    "soak",
)


def write_plan(out: Path, *, compare: dict[str, Any] | None = None) -> Path:
    data = yaml.safe_load((ROOT / "examples/crm-copilot/requirements.yaml").read_text())
    data["planning"].update(verify_duration_s=20, stress_duration_s=15, load_multiples=[1])
    plan = make_plan(parse_requirements(data, "crm"))
    report = build_report(plan, sensitivity=False)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(report, indent=2))
    stack = yaml.safe_load(dump_stack(plan.stack))
    stack["gateway"] = {"tenants": [{"name": n, "tier": "standard"} for n in TENANTS]}
    (out / "stack.yaml").write_text(yaml.safe_dump(stack, sort_keys=False))
    if compare is not None:
        (out / "compare.json").write_text(json.dumps(compare))
    return out


def chat_rows(rng: np.random.Generator, sessions: int, cold: int) -> list[dict[str, Any]]:
    """Agent requests: `cold` of them with nothing cached, spread over the run, the rest warm."""
    rows = []
    every = max(1, sessions * 4 // cold)
    for i in range(sessions * 4):
        is_cold = i % every == 0 and i // every < cold
        rows.append(
            {
                "request_id": f"r{i}",
                "session": f"s{i % sessions}",
                "success": i != 7,
                "error": None if i != 7 else "HTTP 503",
                "t_sched_s": i * 0.1,
                "t_send_s": i * 0.1,
                "ttft_ms": float(rng.uniform(600, 900) if is_cold else rng.uniform(150, 450)),
                "e2el_ms": float(rng.uniform(3000, 9000)),
                "input_len_client": 8000,
                "input_len_server": 8000,
                "output_len": 250,
                "cached_tokens": 0 if is_cold else 6800,
                "ideal_cached_tokens": 6900,
                "itl_ms": [21.0, 22.5],
            }
        )
    return rows


def utility_rows(rng: np.random.Generator, n: int, rate: float) -> list[dict[str, Any]]:
    return [
        {
            "request_id": f"u{i}",
            "session": None,
            "success": True,
            "error": None,
            "t_sched_s": i / rate,
            "t_send_s": i / rate,
            "ttft_ms": float(rng.uniform(50, 120)),
            "e2el_ms": float(rng.uniform(200, 700)),
            "input_len_client": 500,
            "input_len_server": 500,
            "output_len": 12,
            "cached_tokens": 250,
            "ideal_cached_tokens": 250,
            "itl_ms": [12.0],
        }
        for i in range(n)
    ]


def write_bench(
    out: Path,
    model: str,
    rows: list[dict[str, Any]],
    *,
    label: str | None = None,
    extra: dict[str, Any] | None = None,
    window: tuple[float, float] | None = None,
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    ok = [r for r in rows if r["success"]]
    ttft = np.asarray([r["ttft_ms"] for r in ok])
    result = {
        "label": label,
        "model_id": model,
        "num_prompts": len(rows),
        "completed": len(ok),
        "failed": len(rows) - len(ok),
        "request_throughput": len(ok) / 60.0,
        "output_throughput": 1234.5,
        "p50_ttft_ms": float(np.percentile(ttft, 50)),
        "p95_ttft_ms": float(np.percentile(ttft, 95)),
        "p99_ttft_ms": float(np.percentile(ttft, 99)),
        "p50_itl_ms": 22.0,
        "p95_itl_ms": 36.25,
        "p99_itl_ms": 41.5,
        "p50_tpot_ms": 21.5,
        "p95_tpot_ms": 24.75,
        "p99_tpot_ms": 27.25,
        **{
            f"p{p}_e2el_ms": float(np.percentile([r["e2el_ms"] for r in ok], p))
            for p in (50, 95, 99)
        },
        "prefix_cache_hit_rate_client": 0.8473,
        "prefix_cache_hit_rate_server": 0.8391,
        "server_gauges": {
            "kv_cache_usage_perc": {
                "samples": 60,
                "mean": 0.31,
                "p50": 0.2937,
                "p95": 0.41,
                "max": 0.4683,
            }
        },
        "workload": {"name": "agent", "params": {"sessions": "100"}},
        "run": {
            "target": "http://127.0.0.1:9",
            "command": "inhouse bench ...",
            "counters_window_unix_s": None if window is None else list(window),
        },
        **(extra or {}),
    }
    (out / "result.json").write_text(json.dumps(result))
    (out / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def rewrite_run(out: Path, result: dict[str, Any], rows: list[dict[str, Any]]) -> Path:
    """A run directory holding `result` and `rows`, result.json's counts made the rows' own."""
    out.mkdir(parents=True, exist_ok=True)
    ok = sum(1 for r in rows if r["success"])
    counts = {"num_prompts": len(rows), "completed": ok, "failed": len(rows) - ok}
    (out / "result.json").write_text(json.dumps({**result, **counts}))
    (out / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def write_drills(out: Path, *, degraded_ttft: str = "1,034 ms", failing: str | None = None) -> Path:
    """Evidence for the seven drills in issue 22's schema, `failing` with verdict fail."""
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    for name in DRILL_NAMES:
        ok = name != failing
        checks = [
            {
                "name": "no request that had not started streaming failed",
                "expected": "0 failed",
                "observed": "0 failed",
                "ok": True,
            },
        ]
        if name == "kill-replica":
            checks.append(
                {
                    "name": "degraded p95 TTFT",
                    "expected": "<= 1200 ms",
                    "observed": degraded_ttft,
                    "ok": ok,
                }
            )
        evidence = {
            "drill": name,
            "verdict": "pass" if ok else "fail",
            "checks": checks,
            "alerts": [
                {
                    "name": "InhouseEngineReplicaDown",
                    "severity": "page",
                    "fired_s": 41.5,
                    "resolved_s": 97.25,
                    "received_by_alertmanager": True,
                }
            ],
            "prometheus": {"version": "2.42.0", "rules_file": "rules.yaml", "time_scale": 0.1},
            "started": "2026-12-01T12:00:00Z",
            "duration_s": 123.4,
            "stack": "crm-copilot",
        }
        (out / name).mkdir(exist_ok=True)
        (out / name / "evidence.json").write_text(json.dumps(evidence))
        (out / name / "report.md").write_text(
            f"# Drill {name}\n\n## Expected outcome\n\n"
            f"The {name} drill's expected outcome, verbatim.\n\n"
            f"## Red flags\n\n* a red flag of {name}\n\n"
            "## What was observed\n\nobserved 1,034 ms\n\n"
            "## Post-mortem\n\n**Timeline**:\n\n*     9.3 s: SIGKILL chat-1\n"
        )
        if name == "kill-replica":
            (out / name / "timeline.png").write_bytes(_png())
        summary.append({"drill": name, "verdict": evidence["verdict"]})
    (out / "summary.json").write_text(json.dumps({"drills": summary}))
    return out


def _png() -> bytes:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, 1])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def write_all(base: Path) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    plan = write_plan(base / "plan")
    # As the documented sequence runs them: the cold probe alongside the chat run (their
    # engines' counters overlap), then utility.
    chat = write_bench(
        base / "bench" / "chat", "chat", chat_rows(rng, 100, cold=8), window=CHAT_WINDOW
    )
    cold = write_bench(
        base / "bench" / "chat-cold",
        "chat",
        chat_rows(rng, 40, cold=60),
        label="chat-cold",
        window=(CHAT_WINDOW[0] + 1.0, CHAT_WINDOW[0] + 20.0),
    )
    utility = write_bench(
        base / "bench" / "utility",
        "utility",
        utility_rows(rng, 1000, 1000 / 60.0),
        extra={"workload": {"name": "utility", "params": {}}},
        window=(CHAT_WINDOW[1] + 5.0, CHAT_WINDOW[1] + 66.0),
    )
    drills = write_drills(base / "drills")
    return {"plan": plan, "chat": chat, "cold": cold, "utility": utility, "drills": drills}

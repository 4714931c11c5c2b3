"""Reports of one run: `result.json` (vLLM's keys first), `requests.jsonl`, `report.md`."""

from __future__ import annotations

import json
import math
import shlex
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import inhouse
from inhouse.bench.driver import BenchRun
from inhouse.bench.failures import count_reasons, failure_lines
from inhouse.bench.health import assess_client
from inhouse.bench.metrics import VLLM_METRICS, percentile_key, summarize
from inhouse.bench.plan_run import judgement_lines
from inhouse.bench.records import finish, request_row, write_rows
from inhouse.bench.redact import redact_argv, redact_text, redact_value

EXTENSION_ROWS = ("ttft_sched", "e2el_sched", "client_queue_time", "ttft_content")


def build_result(run: BenchRun) -> dict[str, Any]:
    spec = run.spec
    out = _result_header(run)
    summary = summarize(run.results, run.duration_s, spec.percentiles, spec.slo)
    out.update(summary)
    out.update(_server_figures(run.server or {}, summary.get("theoretical_hit_rate")))
    client = _client_health(run)
    out["client"] = client
    out["client_bottleneck"] = client["client_bottleneck"]
    out["slo"] = dict(spec.slo)
    out["workload"] = _workload_block(run)
    out["run"] = _run_block(run)
    if run.simulated is not None:
        out["simulated"] = run.simulated
    out["errors"] = count_reasons(r.outcome.error for r in run.results if not r.success)
    return out


def _result_header(run: BenchRun) -> dict[str, Any]:
    """vLLM's leading keys: when, which endpoint and model, how many prompts at what rate."""
    spec = run.spec
    backend = "openai-chat" if spec.endpoint == "chat" else "openai"
    rate: Any = "inf" if spec.rate is None or math.isinf(spec.rate) else spec.rate
    return {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend,
        "backend": backend,
        "label": spec.label,
        "model_id": run.meta.get("model_id"),
        "tokenizer_id": None,
        "num_prompts": len(run.results),
        "request_rate": rate,
        "burstiness": spec.burstiness,
        "max_concurrency": spec.max_concurrency,
    }


def _server_figures(server: Mapping[str, Any], ideal: Any) -> dict[str, Any]:
    """The engines' own figures: their prefix hit rate (and its share of the ideal), their
    counters and their sampled gauges."""
    server_rate = server.get("prefix_cache_hit_rate_server")
    return {
        "prefix_cache_hit_rate_server": server_rate,
        "hit_rate_efficiency_server": (
            server_rate / ideal if server_rate is not None and ideal else None
        ),
        "server_metrics": server.get("engines", []),
        "server_gauges": server.get("gauges"),
    }


def _client_health(run: BenchRun) -> dict[str, Any]:
    """Whether the client held the load back; a simulated run's never did."""
    if run.simulated is not None:
        return {"client_bottleneck": False, "reasons": [], "simulated": True}
    spec = run.spec
    return assess_client(
        run.results,
        run.health,
        gated=spec.max_concurrency is not None or spec.arrival_mode == "closed",
        requested_rate=run.requested_rate,
        num_workers=spec.workers,
    )


def _workload_block(run: BenchRun) -> dict[str, Any]:
    spec = run.spec
    return {
        "name": run.meta.get("workload_name", spec.workload),
        "params": dict(spec.workload_params),
        "arrival_mode": spec.arrival_mode,
        "rate": spec.rate,
        "concurrency": spec.concurrency,
        "rate_scale": spec.rate_scale,
        # the arrivals' length asked for: `inhouse report` leaves the planner's warm-up (a
        # share of it) out of its p95s
        "duration_s": spec.effective_duration_s,
        "seed": spec.seed,
        "block_size": spec.block_size,
        "theoretical_hit_rate_all_requests": run.theoretical_hit_rate_all,
    }


def _run_block(run: BenchRun) -> dict[str, Any]:
    """How the run went and how to repeat it: source, target, interruptions, versions."""
    return {
        "source": "live" if run.simulated is None else "simulate",
        "target": redact_text(str(run.meta.get("target") or "")) or None,
        "prompt_salt": run.meta.get("prompt_salt"),
        "interrupted": run.interrupted,
        "num_interrupted": run.num_interrupted,
        "num_history_misses": run.meta.get("num_history_misses", 0),
        "percentiles": list(run.spec.percentiles),
        "client_stack": run.meta.get("client"),
        "inhouse_version": inhouse.__version__,
        "command": shlex.join(redact_argv(sys.argv)),
        "counters_window_unix_s": list(run.window_unix_s) if run.window_unix_s else None,
    }


def write_requests(run: BenchRun, out_dir: Path) -> None:
    """`requests.jsonl`: one JSON row per request, every string in it redacted of the run's key;
    written whole or not at all."""
    results = run.results
    t0 = run.t0
    if t0 is None:
        t0 = min((r.outcome.t_sched for r in results), default=0.0)
    secrets = (run.spec.api_key,)
    write_rows([request_row(r, t0, secrets) for r in results], out_dir)


def write_reports(
    run: BenchRun, out_dir: Path, charts: bool = True, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """result.json, requests.jsonl, report.md, and the charts; returns the result. `extra`:
    more top-level keys (`plan_slo`, the verdict of `bench --plan`).

    The run's journal (`requests.jsonl.partial`, the records as they were measured) goes only
    once requests.jsonl and result.json are whole: a crash before that leaves it, and the run
    reads as unfinished."""
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {**build_result(run), **(extra or {})}
    # NOTE: the key is scrubbed from every string written, wherever it might have got to; from
    # the values, not the JSON text, whose key names and literals a short key would rewrite.
    result = dict(redact_value(result, (run.spec.api_key,)))
    write_requests(run, out_dir)
    temp = out_dir / "result.json.tmp"
    temp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    temp.replace(out_dir / "result.json")
    finish(out_dir)
    images: list[str] = []
    if charts:
        from inhouse.bench.charts import write_run_charts

        images = write_run_charts(run.results, out_dir)
    (out_dir / "report.md").write_text(render_markdown(result, images), encoding="utf-8")
    if charts:
        from inhouse.bench.charts import write_html

        write_html(out_dir / "report.html", result, images, render_markdown(result, []))
    return result


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _pct(value: Any) -> str:
    return "—" if value is None else f"{100 * float(value):.1f}%"


def render_markdown(result: dict[str, Any], images: list[str]) -> str:
    lines = _run_header(result)
    lines += _warnings(result)
    if result.get("plan_slo"):
        lines += ["## Against the plan", "", "```", *judgement_lines(result["plan_slo"]), "```", ""]
    lines += _latency_table(result)
    lines += _throughput_table(result)
    lines += _prefix_cache_table(result)
    lines += _client_section(result)
    if result.get("errors"):
        lines += ["", "## Errors", "", "| count | error |", "|---|---|"]
        for text, count in result["errors"].items():
            lines.append(f"| {count} | `{text.strip()[:160]}` |")
    if images:
        lines += ["", "## Charts", ""]
        lines += [f"![{name}]({name})" for name in images]
    return "\n".join(lines) + "\n"


def _run_header(result: dict[str, Any]) -> list[str]:
    """The title, then when, what and how the run was driven, and the command that did it."""
    run = result["run"]
    wl = result["workload"]
    return [
        f"# inhouse bench — {wl['name']} ({run['source']})",
        "",
        f"- date {result['date']}; model `{result['model_id']}`; target `{run['target']}`",
        f"- arrivals: {wl['arrival_mode']}; rate {result['request_rate']}; burstiness "
        f"{result['burstiness']}; concurrency {wl['concurrency']}; max concurrency "
        f"{result['max_concurrency']}; seed {wl['seed']}",
        f"- command: `{run['command']}`",
        "",
    ]


def _warnings(result: dict[str, Any]) -> list[str]:
    """What to read the figures against: a client bottleneck, Ctrl-C, a role-chunk artefact."""
    lines: list[str] = []
    if result.get("client_bottleneck"):
        lines += ["> **WARNING: the client was a bottleneck.**", ">"]
        lines += [f"> - {reason}" for reason in result["client"]["reasons"]]
        lines.append("")
    if result["run"].get("interrupted"):
        lines += [
            f"> Interrupted: {result['run']['num_interrupted']} in-flight request(s) dropped; "
            "figures cover what finished before Ctrl-C.",
            "",
        ]
    if result.get("ttft_role_chunk_artifact"):
        lines += ["> TTFT and first-content time differ by > 1 ms (role-chunk artefact).", ""]
    return lines


def _throughput_table(result: dict[str, Any]) -> list[str]:
    return [
        "",
        "## Throughput and goodput",
        "",
        "| metric | value |",
        "|---|---|",
        f"| duration (s) | {_fmt(result['duration'])} |",
        f"| completed / failed | {result['completed']} / {result['failed']} |",
        f"| request throughput (req/s) | {_fmt(result['request_throughput'])} |",
        f"| output throughput (tok/s) | {_fmt(result['output_throughput'])} |",
        f"| total token throughput (tok/s) | {_fmt(result['total_token_throughput'])} |",
        f"| peak output (token chunks/s) | {_fmt(result['max_output_tokens_per_s'])} |",
        f"| peak concurrent requests | {result['max_concurrent_requests']} |",
        f"| SLOs | {_slo_text(result['slo'])} |",
        f"| request goodput (req/s) | {_fmt(result['request_goodput'])} |",
        f"| good request fraction | {_pct(result['good_request_fraction'])} |",
    ]


def _prefix_cache_table(result: dict[str, Any]) -> list[str]:
    return [
        "",
        "## Prefix cache",
        "",
        "| measure | hit rate |",
        "|---|---|",
        f"| client (Σ cached / Σ prompt tokens) | {_pct(result['prefix_cache_hit_rate_client'])} |",
        "| server (/metrics delta: every client of the engines meanwhile, not only this run) | "
        f"{_pct(result['prefix_cache_hit_rate_server'])} |",
        f"| workload's theoretical best | {_pct(result['theoretical_hit_rate'])} |",
        f"| client / theoretical | {_fmt(result['hit_rate_efficiency_client'], 3)} |",
        f"| server / theoretical | {_fmt(result['hit_rate_efficiency_server'], 3)} |",
        "",
    ]


def _latency_table(result: dict[str, Any]) -> list[str]:
    pcts = [percentile_key(p) for p in result["run"]["percentiles"]]
    head = "| metric (ms) | mean | median | std | " + " | ".join(f"p{p}" for p in pcts) + " |"
    lines = [
        "## Latency (vLLM definitions)",
        "",
        "Over every request of the run, its warm-up included, as `vllm bench serve` counts; "
        "`--plan`'s verdict and `inhouse report` leave the first 20% (at most 30 s) out.",
        "",
        head,
        "|---" * (4 + len(pcts)) + "|",
    ]

    def row(name: str) -> str | None:
        if f"mean_{name}_ms" not in result:
            return None
        cells = [_fmt(result[f"{k}_{name}_ms"]) for k in ("mean", "median", "std")]
        cells += [_fmt(result.get(f"p{p}_{name}_ms")) for p in pcts]
        return f"| {name} | " + " | ".join(cells) + " |"

    for name in VLLM_METRICS:
        line = row(name)
        if line:
            lines.append(line)
    lines += ["", "Extensions (from the scheduled arrival, and the client's queue):", ""]
    lines += [head, "|---" * (4 + len(pcts)) + "|"]
    for name in (*EXTENSION_ROWS, "itl_per_token"):
        line = row(name)
        if line:
            lines.append(line)
    return lines


def _slo_text(slo: dict[str, float]) -> str:
    return ", ".join(f"{k} ≤ {v:g}" for k, v in slo.items()) or "none given"


def _client_section(result: dict[str, Any]) -> list[str]:
    client = result["client"]
    if client.get("simulated"):
        return ["## Client", "", "Simulated run: no client."]
    lines = [
        "## Client health",
        "",
        f"- send lag p50 / p99 / max: {_fmt(client['send_lag_p50_ms'])} / "
        f"{_fmt(client['send_lag_p99_ms'])} / {_fmt(client['send_lag_max_ms'])} ms",
        f"- rate requested / scheduled / achieved: {_fmt(client['requested_rate'])} / "
        f"{_fmt(client['scheduled_rate'])} / {_fmt(client['achieved_rate'])} req/s",
        f"- workers: {client['workers']}; stack: {result['run']['client_stack']}",
        "",
        "| process | CPU (of a core) | loop lag p50 | p99 | max (ms) |",
        "|---|---|---|---|---|",
    ]
    for proc in client["processes"]:
        lines.append(
            f"| {proc['process']} | {_pct(proc['cpu_fraction'])} | "
            f"{_fmt(proc['loop_lag_p50_ms'])} | {_fmt(proc['loop_lag_p99_ms'])} | "
            f"{_fmt(proc['loop_lag_max_ms'])} |"
        )
    return lines


def print_summary(result: dict[str, Any], title: str = " Serving Benchmark Result ") -> str:
    """vLLM-style console summary."""
    width = 50
    rows = [
        ("Successful requests:", result["completed"]),
        ("Failed requests:", result["failed"]),
        ("Benchmark duration (s):", result["duration"]),
        ("Total input tokens:", result["total_input_tokens"]),
        ("Total generated tokens:", result["total_output_tokens"]),
        ("Request throughput (req/s):", result["request_throughput"]),
        ("Request goodput (req/s):", result["request_goodput"]),
        ("Output token throughput (tok/s):", result["output_throughput"]),
        ("Total token throughput (tok/s):", result["total_token_throughput"]),
        ("Prefix hit rate client/server/ideal:", None),
    ]
    lines = ["{s:{c}^{n}}".format(s=title, n=width, c="=")]
    for label, value in rows:
        if label.startswith("Prefix"):
            value = " / ".join(
                _pct(result.get(k))
                for k in (
                    "prefix_cache_hit_rate_client",
                    "prefix_cache_hit_rate_server",
                    "theoretical_hit_rate",
                )
            )
        lines.append(f"{label:<40} {_fmt(value)}")
    for name, header in (
        ("ttft", "Time to First Token"),
        ("tpot", "Time per Output Token (excl. 1st token)"),
        ("itl", "Inter-token Latency"),
        ("e2el", "End-to-end Latency"),
        ("ttft_sched", "TTFT from scheduled arrival"),
    ):
        lines.append("{s:{c}^{n}}".format(s=header, n=width, c="-"))
        lines.append(f"{'Mean ' + name + ' (ms):':<40} {_fmt(result[f'mean_{name}_ms'])}")
        lines.append(f"{'Median ' + name + ' (ms):':<40} {_fmt(result[f'median_{name}_ms'])}")
        for p in result["run"]["percentiles"]:
            key = f"p{percentile_key(p)}_{name}_ms"
            lines.append(
                f"{'P' + percentile_key(p) + ' ' + name + ' (ms):':<40} {_fmt(result[key])}"
            )
    lines.append("=" * width)
    return "\n".join(lines)


def console_lines(result: dict[str, Any]) -> list[str]:
    """What the console says after the summary table: where the server-side hit rate came
    from, why requests failed, and the verdict against the plan."""
    lines = []
    engines = result.get("server_metrics") or []
    measured = [e for e in engines if "error" not in e]
    if result.get("prefix_cache_hit_rate_server") is not None:
        lines.append(
            f"Server-side prefix-cache hit rate: {_pct(result['prefix_cache_hit_rate_server'])} "
            f"(vllm:prefix_cache_hits / queries over the run, {len(measured)} engine(s))"
        )
    elif measured:
        lines.append(
            f"Server-side prefix-cache hit rate: none ({len(measured)} engine(s) scraped; no "
            "prompt token reached them during the run)"
        )
    elif engines:
        why = "; ".join(f"{e['url']}: {e['error']}" for e in engines if "error" in e)[:300]
        lines.append(
            f"Server-side prefix-cache hit rate: unknown ({why}); through a gateway, pass "
            "--metrics-url per engine, or --plan DIR to scrape the plan's engines"
        )
    if result.get("num_streams_in_one_read"):
        lines.append(
            f"Warning: {result['num_streams_in_one_read']} of "
            f"{result['num_streams_3plus_chunks']} streamed answers arrived in one read (a "
            "buffering proxy between bench and the server?): their TTFT is their E2EL and "
            "their ITL 0"
        )
    lines += failure_lines(result.get("errors") or {}, int(result.get("failed") or 0))
    if result.get("plan_slo"):
        lines += judgement_lines(result["plan_slo"])
    return lines

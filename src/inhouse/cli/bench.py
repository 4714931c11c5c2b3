"""Benchmark an OpenAI-compatible endpoint (or the fleet simulator) with the project's workloads.

    inhouse bench --target http://127.0.0.1:8000 --workload utility --rate 20 --duration 60 \\
        --slo ttft_ms=800,itl_ms=60,e2el_ms=2000 --out results/utility
    inhouse bench --simulate examples/crm-copilot/stack.yaml --workload agent --out results/sim
    inhouse bench sweep --target URL --workload utility --rate 20 --slo ttft_ms=800 --out DIR
    inhouse bench compare results/before results/after --threshold 10
    inhouse bench report results/utility [--partial]
    inhouse bench --plan out/crm --workload chat --target http://127.0.0.1:8000 --out results/chat

Metrics carry `vllm bench serve`'s names and definitions; see docs/bench.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import os
import signal
import sys
from pathlib import Path
from typing import Any

from inhouse.errors import SpecError
from inhouse.launch.engine_args import DEFAULT_ENGINE_BASE_PORT

COMMAND = "bench"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # stop the run, keep what it measured
HELP = "SLO benchmarks (vLLM bench metrics) against a live endpoint or the simulator"


def _rate(text: str) -> float:
    return math.inf if text.lower() in ("inf", "infinity") else float(text)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("target")
    where.add_argument("--target", help="base URL, e.g. http://127.0.0.1:8000")
    where.add_argument(
        "--api-key",
        help="sent as `Authorization: Bearer K` (default: env INHOUSE_API_KEY, else "
        "OPENAI_API_KEY; prefer those: a command line is visible to every user in `ps`)",
    )
    where.add_argument(
        "--plan",
        type=Path,
        metavar="PLAN_DIR",
        help="drive a workload of the plan `inhouse plan --out` wrote (--workload NAME) and "
        "judge it against the plan's SLOs",
    )
    where.add_argument(
        "--engine-base-port",
        type=int,
        default=DEFAULT_ENGINE_BASE_PORT,
        help="with --plan: the engines `inhouse up` started, scraped for the server-side hit rate",
    )
    where.add_argument("--model", help="model name to request (default: the first /v1/models)")
    where.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    where.add_argument(
        "--metrics-url",
        action="extend",
        nargs="+",
        default=None,
        metavar="URL",
        help="an engine's Prometheus /metrics (repeat per engine; default TARGET/metrics)",
    )
    where.add_argument("--simulate", type=Path, metavar="STACK.yaml", help="run the simulator")
    where.add_argument("--policy", help="with --simulate: override every pool's routing policy")
    load = parser.add_argument_group("workload and load")
    load.add_argument(
        "--workload", help="agent, utility, longctx, shared-prefix, fixed, trace:PATH"
    )
    load.add_argument(
        "-p", "--param", action="append", metavar="KEY=VALUE", help="workload parameter"
    )
    load.add_argument("--list", action="store_true", help="list workloads and their parameters")
    load.add_argument("--rate", type=_rate, help="requests/s (agent: sessions/s); or inf")
    load.add_argument("--concurrency", type=int, help="closed loop (agent: concurrent sessions)")
    load.add_argument("--max-concurrency", type=int, help="cap on requests in flight (vLLM's)")
    load.add_argument("--burstiness", type=_rate, default=1.0, help="gamma shape; 1 = Poisson")
    load.add_argument("--rate-scale", type=float, default=1.0, help="scale the workload's load")
    load.add_argument("--duration", type=float, help="seconds of arrivals (default 60)")
    load.add_argument("--num-requests", type=int, help="stop after N requests")
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--block-size", type=int, default=16, help="prefix block size (tokens)")
    load.add_argument("--prompt-salt", type=int, help="reuse an earlier run's exact prompts")
    load.add_argument("--no-ignore-eos", action="store_true", help="let the model stop early")
    load.add_argument("--no-stream", action="store_true", help="non-streaming: E2EL only")
    load.add_argument(
        "--continuous-usage", action="store_true", help="ask for usage in every chunk"
    )
    load.add_argument("--request-timeout", type=float, default=600.0, metavar="S")
    out = parser.add_argument_group("measurement and output")
    out.add_argument("--slo", help="e.g. ttft_ms=800,itl_ms=60,e2el_ms=2000 (tpot_ms too)")
    out.add_argument("--percentiles", default="50,90,95,99", help="comma-separated")
    out.add_argument("--workers", type=int, default=1, help="client processes")
    out.add_argument(
        "--kernel-timestamps",
        action="store_true",
        help="time reads by the kernel's receive stamps (Linux): client delays drop out",
    )
    out.add_argument(
        "--realtime",
        action="store_true",
        help="run the client at SCHED_FIFO priority (Linux, root): a shared host's other "
        "jobs cannot delay its reads",
    )
    out.add_argument("--label", help="free text stored in result.json")
    out.add_argument("--out", type=Path, help="output directory")
    out.add_argument("--no-charts", action="store_true")
    out.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    sub = parser.add_subparsers(dest="bench_command", metavar="{sweep,compare,report}")
    sweep = sub.add_parser("sweep", help="multiples of a peak rate, then an SLO search")
    add_run_arguments(sweep)
    sweep.add_argument("--multipliers", default="1,2,3", help="of --rate (default 1,2,3)")
    sweep.add_argument("--search", action=argparse.BooleanOptionalAction, default=True)
    sweep.add_argument("--search-steps", type=int, default=4)
    sweep.add_argument(
        "--slo-target", type=float, default=0.99, help="fraction of requests that must meet"
    )
    compare = sub.add_parser("compare", help="regression table between two results")
    compare.add_argument("base", type=Path, help="result dir or result.json")
    compare.add_argument("new", type=Path, help="result dir or result.json")
    compare.add_argument("--threshold", type=float, default=10.0, help="percent (default 10)")
    compare.add_argument(
        "--metric-threshold", action="append", metavar="METRIC=PCT", help="per-metric limit"
    )
    compare.add_argument("--json", action="store_true", help="print the rows as JSON")
    report = sub.add_parser("report", help="the summary of a run directory, finished or not")
    report.add_argument("run_dir", type=Path, metavar="DIR", help="the run's --out directory")
    report.add_argument(
        "--partial",
        action="store_true",
        help="summarise an unfinished run (killed or crashed) from its requests.jsonl.partial",
    )
    report.add_argument("--percentiles", default="50,90,95,99", help="with --partial")
    report.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    command = getattr(args, "bench_command", None)
    if command == "compare":
        return _compare(args)
    if command == "report":
        return _report(args)
    if args.list:
        return _list()
    spec = spec_from_args(args)
    if args.out is None:
        raise SpecError("--out DIR is required (where result.json and report.md go)")
    if command == "sweep":
        return _sweep(args, spec)
    result = run_point(spec, args.out, args)
    if result["run"]["interrupted"]:
        return 130  # what was measured is written; the run is incomplete
    if "plan_slo" in result:
        return 0 if result["plan_slo"]["pass"] else 1
    return 0 if result["completed"] else 1


def spec_from_args(args: argparse.Namespace) -> Any:
    from inhouse.bench.config import BenchSpec, parse_params, parse_slo

    if not args.workload:
        raise SpecError("--workload is required (agent, utility, ...; `--list` shows them)")
    if getattr(args, "plan", None) is not None:
        return _plan_spec(args)
    if not args.target and not args.simulate:
        raise SpecError("give --target URL (a live endpoint) or --simulate STACK.yaml")
    percentiles = _percentiles(args.percentiles)
    return BenchSpec(
        workload=args.workload,
        target=args.target,
        api_key=api_key_of(args),
        workload_params=parse_params(args.param),
        rate=args.rate,
        burstiness=args.burstiness,
        concurrency=args.concurrency,
        max_concurrency=args.max_concurrency,
        duration_s=args.duration,
        num_requests=args.num_requests,
        slo=parse_slo(args.slo),
        metrics_urls=tuple(args.metrics_url or ()),
        seed=args.seed,
        model=args.model,
        endpoint=args.endpoint,
        block_size=args.block_size,
        percentiles=percentiles,
        workers=args.workers,
        prompt_salt=args.prompt_salt,
        request_timeout_s=args.request_timeout,
        ignore_eos=not args.no_ignore_eos,
        continuous_usage=args.continuous_usage,
        rate_scale=args.rate_scale,
        label=args.label,
        stream=not args.no_stream,
        kernel_timestamps=args.kernel_timestamps,
    )


def api_key_of(args: argparse.Namespace) -> str | None:
    """--api-key, else INHOUSE_API_KEY, else OPENAI_API_KEY (recorded nowhere: bench.redact)."""
    from inhouse.bench.redact import API_KEY_ENV

    if args.api_key:
        return str(args.api_key)
    for name in API_KEY_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return None


def _plan_spec(args: argparse.Namespace) -> Any:
    """The plan's workload with the user's flags on top (`-p` overrides one parameter)."""
    from inhouse.bench.plan_run import load_plan_workload

    workload = load_plan_workload(args.plan, args.workload)
    if not args.target and not args.simulate:
        raise SpecError(
            "with --plan, give --target URL (the gateway `inhouse up "
            f"{workload.stack_path}` prints, e.g. http://127.0.0.1:8000) or --simulate "
            f"{workload.stack_path}"
        )
    args.plan_workload = workload
    metrics = tuple(args.metrics_url or ())
    if args.target and not metrics:
        metrics = workload.engine_metrics_urls(args.engine_base_port)
    args.workload, args.metrics_url = workload.workload, list(metrics)
    args.param = [f"{k}={v}" for k, v in workload.params.items()] + list(args.param or ())
    args.model = args.model or workload.model
    args.duration = args.duration or workload.duration_s
    return spec_from_args(argparse.Namespace(**{**vars(args), "plan": None}))


def run_point(spec: Any, out_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One run (live or simulated) with its reports written to `out_dir`."""
    from inhouse.bench.health import banner
    from inhouse.bench.report import console_lines, print_summary, write_reports

    if args.simulate:
        from inhouse.bench.simulate import run_simulated

        bench_run = run_simulated(spec, args.simulate, args.policy)
    else:
        from inhouse.bench.sender import use_fast_loop, use_realtime_priority

        if getattr(args, "realtime", False):
            use_realtime_priority()
        use_fast_loop()
        bench_run = asyncio.run(_live(spec, args, out_dir))
    extra = None
    plan_workload = getattr(args, "plan_workload", None)
    if plan_workload is not None:
        from inhouse.bench.plan_run import judge

        extra = {"plan_slo": judge(bench_run.results, plan_workload, spec.duration_s)}
    result = write_reports(bench_run, out_dir, charts=not args.no_charts, extra=extra)
    print(print_summary(result))
    for line in console_lines(result):
        print(line)
    warning = banner(result["client"])
    if warning:
        print(warning, file=sys.stderr)
    if bench_run.interrupted:
        print(f"interrupted: wrote what was measured to {out_dir}", file=sys.stderr)
    print(f"reports in {out_dir}/ (result.json, report.md, report.html)")
    return result


async def _live(spec: Any, args: argparse.Namespace, out_dir: Path) -> Any:
    from inhouse.bench.driver import run_live
    from inhouse.bench.progress import Progress

    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = None
    if show:
        total = spec.schedule_size() if spec.arrival_mode == "schedule" else spec.num_requests
        progress = Progress(total, spec.effective_duration_s)
    loop = asyncio.get_running_loop()

    def hook(driver: Any) -> None:
        def on_signal(name: str) -> None:
            driver.interrupt()
            for signum in STOP_SIGNALS:
                loop.remove_signal_handler(signum)
            with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
                print(
                    f"\n{name}: stopping; writing what was measured (again to abort)",
                    file=sys.stderr,
                )

        # NOTE: SIGTERM (`kill`, `timeout`, a pod deleted) and SIGHUP (the terminal closed)
        # stop the run as Ctrl-C does; by default they killed it with everything it measured.
        for signum in STOP_SIGNALS:
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            loop.add_signal_handler(signum, on_signal, name)

    try:
        return await run_live(spec, progress, on_driver=hook, out_dir=out_dir)
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)


def _sweep(args: argparse.Namespace, spec: Any) -> int:
    from inhouse.bench.charts import write_html, write_sweep_chart
    from inhouse.bench.sweep import render_sweep_markdown, run_sweep

    if spec.rate is None or math.isinf(spec.rate):
        raise SpecError("bench sweep needs --rate R: the peak rate the multipliers scale")
    try:
        multipliers = [float(m) for m in args.multipliers.split(",") if m]
    except ValueError:
        raise SpecError(f"--multipliers {args.multipliers!r}: use e.g. 1,2,3") from None

    def point(point_spec: Any, out_dir: Path) -> dict[str, Any]:
        print(f"== sweep point: {point_spec.rate:g} req/s", file=sys.stderr)
        return run_point(point_spec, out_dir, args)

    sweep = run_sweep(
        spec,
        spec.rate,
        multipliers,
        args.out,
        point,
        search=args.search,
        search_steps=args.search_steps,
        slo_target=args.slo_target,
    )
    chart = None if args.no_charts else write_sweep_chart(sweep["points"], args.out)
    text = render_sweep_markdown(sweep, chart)
    (args.out / "report.md").write_text(text, encoding="utf-8")
    if chart:
        write_html(args.out / "report.html", {}, [chart], text)
    print(text)
    if sweep["interrupted"]:
        print(f"interrupted: wrote the points measured to {args.out}", file=sys.stderr)
        return 130
    return 0


def _compare(args: argparse.Namespace) -> int:
    from inhouse.bench.compare import (
        compare,
        load_result,
        parse_overrides,
        render_table,
        require_common_metrics,
    )

    base, new = load_result(args.base), load_result(args.new)
    rows = compare(base, new, args.threshold, parse_overrides(args.metric_threshold))
    require_common_metrics(rows, base, new, (str(args.base), str(args.new)))
    if args.json:
        print(json.dumps([dataclasses.asdict(row) for row in rows], indent=2))
    else:
        print(render_table(rows, str(args.base), str(args.new)))
    return 1 if any(row.status == "REGRESSION" for row in rows) else 0


def _report(args: argparse.Namespace) -> int:
    """A run's summary again: a finished run's from its result.json; an unfinished one's, with
    --partial, from the records its journal kept, headed as unfinished."""
    from inhouse.bench.compare import load_result
    from inhouse.bench.partial import headline, read_partial, summarize_partial
    from inhouse.bench.records import unfinished
    from inhouse.bench.report import console_lines, print_summary

    run_dir: Path = args.run_dir
    if not run_dir.is_dir():
        raise SpecError(f"{run_dir}: no such directory; give a run's --out directory")
    problem = unfinished(run_dir)
    if args.partial:
        percentiles = _percentiles(args.percentiles)
        summary = summarize_partial(read_partial(run_dir), percentiles)
        if args.json:
            print(json.dumps(summary, indent=2))
            return 0
        print("\n".join(headline(summary, run_dir)))
        print(print_summary(summary, title=" UNFINISHED run (partial) "))
        for line in console_lines(summary):
            print(line)
        return 0
    if problem is not None:
        raise SpecError(f"{problem}; add --partial to summarise them")
    result = load_result(run_dir)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(print_summary(result))
    for line in console_lines(result):
        print(line)
    return 0


def _percentiles(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(p) for p in text.split(",") if p)
    except ValueError:
        raise SpecError(f"--percentiles {text!r}: use e.g. 50,90,99") from None


def _list() -> int:
    from inhouse.workload import workload_names, workload_params

    for name in workload_names():
        params = ", ".join(f"{k}={v}" for k, v in workload_params(name).items())
        print(f"{name}: {params}")
    print("trace:PATH: a Mooncake .jsonl or Azure .csv trace")
    return 0

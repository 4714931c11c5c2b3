"""Simulate a stack under a workload in virtual time, routing policies side by side.

`inhouse simulate --stack STACK.yaml --workload agent --policy round_robin,cache_aware`, or
without a stack file: `--model M --gpu G --quant Q --tp N --replicas R` (plus engine knobs).
Workloads: agent, utility, longctx, shared-prefix, fixed, or trace:PATH (Mooncake .jsonl,
Azure .csv); `-W key=value` sets a workload parameter. Prints a table; `--json OUT` writes
every policy's summary with vLLM bench's keys. See docs/simulate.md.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from inhouse.bench.config import say_rows_left_out
from inhouse.errors import SpecError
from inhouse.fleet.volume import refuse_a_run_too_large, simulate_within_limits
from inhouse.routing import policy_names
from inhouse.spec.load import MAX_TRACE_BYTES, load_stack, read_spec_text, resolve_local_models
from inhouse.spec.stack import StackSpec, parse_stack
from inhouse.workload import Workload, make_workload, workload_names
from inhouse.workload.traces import TraceWorkload, read_trace

T = TypeVar("T")

COMMAND = "simulate"
HELP = "simulate a stack and a workload in virtual time; compare routing policies"
DEFAULT_DURATION_S = 300.0
# (summary key, column label, format) of the printed table, in order.
TABLE_ROWS = (
    ("completed", "completed", "{:.0f}"),
    ("failed", "failed", "{:.0f}"),
    ("request_throughput", "requests/s", "{:.2f}"),
    ("output_throughput", "output tokens/s", "{:.0f}"),
    ("prefix_cache_hit_rate", "prefix cache hit rate", "{:.3f}"),
    ("theoretical_hit_rate", "theoretical hit rate", "{:.3f}"),
    ("replica_load_max_over_mean", "replica load max/mean", "{:.3f}"),
    ("mean_ttft_ms", "mean TTFT ms", "{:.1f}"),
    ("p95_ttft_ms", "p95 TTFT ms", "{:.1f}"),
    ("p99_ttft_ms", "p99 TTFT ms", "{:.1f}"),
    ("mean_tpot_ms", "mean TPOT ms", "{:.2f}"),
    ("p95_itl_ms", "p95 ITL ms", "{:.2f}"),
    ("mean_e2el_ms", "mean E2EL ms", "{:.0f}"),
    ("num_preemptions", "preemptions", "{:.0f}"),
    ("goodput", "goodput req/s", "{:.2f}"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", type=Path, help="stack file (docs/stack.md)")
    parser.add_argument("--model", help="without --stack: model of a one-pool stack")
    parser.add_argument("--gpu", default="h100_sxm")
    parser.add_argument("--quant", default="bf16")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--backend", default="vllm")
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--gpu-memory-utilization", type=float)
    parser.add_argument("--host-kv-gib", type=float)
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument(
        "--workload",
        default="agent",
        help=f"{', '.join(workload_names())}, or trace:PATH (.jsonl Mooncake, .csv Azure)",
    )
    parser.add_argument(
        "-W",
        "--workload-param",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="a workload parameter (repeatable); lengths are P50:P95",
    )
    parser.add_argument(
        "--policy",
        help=f"routing policy, or a comma-separated list to compare ({', '.join(policy_names())});"
        " default: each pool's own",
    )
    parser.add_argument(
        "--duration", type=float, help="seconds of arrivals (default 300; a trace's own span)"
    )
    parser.add_argument("--rate-scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slo", help="e.g. ttft_ms=800,itl_ms=60 (also tpot_ms, e2el_ms)")
    parser.add_argument(
        "--down",
        action="append",
        default=[],
        metavar="POOL=N",
        help="replicas of a pool down (degraded mode)",
    )
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the summaries as JSON")


def run(args: argparse.Namespace) -> int:
    _positive("--rate-scale", args.rate_scale)
    if args.duration is not None:
        _positive("--duration", args.duration)
    stack = _stack(args)
    workload, default_duration_s = _workload(args.workload, args.workload_param, args.rate_scale)
    duration_s = args.duration if args.duration is not None else default_duration_s
    refuse_a_run_too_large(workload, duration_s, args.rate_scale)
    policies: list[str | None] = [None]
    if args.policy:
        policies = [p.strip() for p in args.policy.split(",") if p.strip()]
        unknown = [p for p in policies if p not in policy_names()]
        if unknown:
            raise SpecError(f"--policy {unknown[0]!r} is unknown; use {', '.join(policy_names())}")
    slo = _pairs("--slo", [args.slo] if args.slo else [], float)
    down = _pairs("--down", args.down, int)
    summaries: dict[str, dict[str, object]] = {}
    speeds: dict[str, float] = {}
    for policy in policies:
        started = time.perf_counter()
        result = simulate_within_limits(
            stack,
            workload,
            duration_s=duration_s,
            rate_scale=args.rate_scale,
            fix="shorten --duration, or lower --rate-scale or the workload's clients "
            "(-W sessions=, -W concurrency=)",
            policy=policy,
            seed=args.seed,
            down_replicas=down,
        )
        wall_s = time.perf_counter() - started
        label = policy or "+".join(sorted(set(result.policies.values())))
        summaries[label] = result.summary(slo)
        speeds[label] = result.end_s / wall_s if wall_s > 0 else 0.0
    pools = ", ".join(f"{p.name} {p.replicas}x {p.model} tp{p.tp} {p.quant}" for p in stack.pools)
    print(f"stack {stack.name}: {pools}")
    print(
        f"workload {getattr(workload, 'name', args.workload)}, {duration_s:g} s of arrivals, "
        f"rate x{args.rate_scale:g}, seed {args.seed}"
    )
    print(_table(summaries, speeds))
    if args.json:
        out = {
            "stack": stack.name,
            "workload": args.workload,
            "duration_s": duration_s,
            "rate_scale": args.rate_scale,
            "seed": args.seed,
            "slo": slo,
            "policies": summaries,
        }
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


def _positive(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        what = flag.removeprefix("--").replace("-", " ")
        raise SpecError(f"{flag} {value:g}: {what} must be positive and finite (seconds, a factor)")


def _stack(args: argparse.Namespace) -> StackSpec:
    if args.stack:
        if args.model:
            raise SpecError("give either --stack or --model (a one-pool stack), not both")
        return load_stack(args.stack)
    if not args.model:
        raise SpecError(
            "give --stack STACK.yaml, or --model M (with --gpu, --quant, --tp, --replicas)"
        )
    knobs = {
        key: value
        for key, value in (
            ("max_num_seqs", args.max_num_seqs),
            ("max_num_batched_tokens", args.max_num_batched_tokens),
            ("max_model_len", args.max_model_len),
            ("gpu_memory_utilization", args.gpu_memory_utilization),
            ("host_kv_gib", args.host_kv_gib),
        )
        if value is not None
    }
    if args.no_prefix_caching:
        knobs["enable_prefix_caching"] = False
    pool = {
        "name": "default",
        "model": args.model,
        "gpu": args.gpu,
        "quant": args.quant,
        "tp": args.tp,
        "replicas": args.replicas,
        "backend": args.backend,
        "knobs": knobs,
    }
    stack = parse_stack({"version": 1, "name": "cli", "pools": [pool]}, "flags")
    resolve_local_models(p.model for p in stack.pools)
    return stack


def _workload(spec: str, raw_params: list[str], rate_scale: float) -> tuple[Workload, float]:
    params = _pairs("-W", raw_params, str)
    if spec.startswith("trace:"):
        if params:
            raise SpecError("-W does not apply to trace replay (use --rate-scale, --duration)")
        trace = load_trace(Path(spec.removeprefix("trace:")))
        return trace, trace.span_s / rate_scale + 1.0
    return make_workload(spec, params), DEFAULT_DURATION_S


def load_trace(path: Path) -> TraceWorkload:
    """Read a Mooncake (.jsonl) or Azure (.csv) trace file."""
    text = read_spec_text(path, "trace", MAX_TRACE_BYTES)
    if path.suffix not in (".jsonl", ".csv"):
        raise SpecError(f"trace {path}: use a Mooncake .jsonl or an Azure .csv file")
    azure = path.suffix == ".csv"
    trace = read_trace(text, str(path), azure=azure, name="azure" if azure else "mooncake")
    say_rows_left_out(trace, path)
    return trace


def _pairs(flag: str, raw: list[str], convert: Callable[[str], T]) -> dict[str, T]:
    out: dict[str, T] = {}
    for chunk in raw:
        for item in chunk.split(","):
            if not item.strip():
                continue
            key, sep, value = item.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise SpecError(f"{flag} {item!r}: use KEY=VALUE")
            try:
                out[key.strip()] = convert(value.strip())
            except ValueError:
                raise SpecError(f"{flag} {item!r}: {value.strip()!r} is not a number") from None
    return out


def _table(summaries: dict[str, dict[str, object]], speeds: dict[str, float]) -> str:
    labels = list(summaries)
    width = max(12, *(len(label) + 2 for label in labels))
    lines = [f"{'':24}" + "".join(f"{label:>{width}}" for label in labels)]
    for key, title, fmt in TABLE_ROWS:
        cells = []
        for label in labels:
            value = summaries[label].get(key)
            cells.append(f"{'-' if value is None else fmt.format(value):>{width}}")
        lines.append(f"{title:24}" + "".join(cells))
    lines.append(
        f"{'simulated s per wall s':24}"
        + "".join(f"{speeds[label]:>{width}.0f}" for label in labels)
    )
    return "\n".join(lines)

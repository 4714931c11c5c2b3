"""Sections 1, 2, 3 and 5: workload, hardware, selection, capacity — what the plan decided."""

from __future__ import annotations

from typing import Any

from inhouse.report import measure
from inhouse.report.alternative import why_infeasible
from inhouse.report.context import Context, table
from inhouse.report.figures import Figure, Source
from inhouse.report.inputs import PathPart
from inhouse.report.load import at_peak
from inhouse.report.mermaid import deployment_diagram
from inhouse.report.slo import BENCH_KEY, METRIC, NO_DRILL_MEASURES

SGLANG_TRADE = (
    "SGLang's RadixAttention keeps a token-level radix tree of every cached prefix and often "
    "hits more on agent traffic; vLLM wins on operations: its Prometheus metrics (the names "
    "every alert and dashboard here reads), Kubernetes tooling (production-stack, llm-d), "
    "release cadence and a longer support record. For a production install with a multi-year "
    "support horizon, operations maturity is the tiebreaker."
)


def workloads(ctx: Context) -> list[str]:
    lines = ctx.section("1. Workload characterization")
    rows = [
        _workload_row(ctx, name, w) for name, w in (ctx.inputs.plan.get("workloads") or {}).items()
    ]
    lines += [
        "Each workload is defined by the generator the planner and the simulator replay: what "
        "arrives, how big, how often, and how much of each prompt repeats an earlier one.",
        "",
        *table(
            [
                "workload",
                "kind",
                "traffic",
                "prompt tokens mean / p95",
                "output tokens mean / p95",
                "prefix hit planned",
                "prefix hit measured",
            ],
            rows,
        ),
    ]
    return lines + _agent_hit_paragraphs(ctx)


def _workload_row(ctx: Context, name: str, w: dict[str, Any]) -> list[str]:
    """A workload's kind, traffic, prompt and output lengths, and its hit rate planned and
    measured (by the bench runs at its peak)."""
    base = ("workloads", name)
    traffic = _traffic_text(ctx, base, w.get("traffic", {}))
    runs, lighter = at_peak(ctx.inputs, ctx.inputs.runs_for(name))
    hit = (
        measure.Reading(None, lighter)
        if lighter
        else measure.prefix_hit_rate(runs, ctx.inputs.benches)
    )
    row = [
        name,
        w.get("kind", ""),
        traffic,
        f"{ctx.plan(*base, 'prompt_tokens', 'mean', kind='workload')} / "
        f"{ctx.plan(*base, 'prompt_tokens', 'p95', kind='workload')}",
        f"{ctx.plan(*base, 'output_tokens', 'mean', kind='workload')} / "
        f"{ctx.plan(*base, 'output_tokens', 'p95', kind='workload')}",
        ctx.plan(*base, "planned_prefix_hit_rate", kind="workload", unit="pct"),
    ]
    shown = ctx.show(hit.figure, f"not measured ({hit.why})")
    return [*row, f"{shown} ({hit.note})" if hit.note else shown]


def _traffic_text(ctx: Context, base: tuple[str, str], t: dict[str, Any]) -> str:
    """Average and peak: concurrent sessions for a session workload, else requests a minute."""
    if "peak_sessions" in t:
        avg = ctx.plan(*base, "traffic", "avg_sessions", kind="workload", unit="count")
        peak = ctx.plan(*base, "traffic", "peak_sessions", kind="workload", unit="count")
        return f"{avg} avg / {peak} peak concurrent sessions"
    per_min = {"kind": "workload", "unit": "rate", "scale": 60.0}
    avg = ctx.plan(*base, "traffic", "avg_per_s", **per_min)  # type: ignore[arg-type]
    peak = ctx.plan(*base, "traffic", "peak_per_s", **per_min)  # type: ignore[arg-type]
    return f"{avg} avg / {peak} peak req/min"


def _agent_hit_paragraphs(ctx: Context) -> list[str]:
    """For each agent workload, why its planned prefix hit rate carries the section."""
    lines: list[str] = []
    for name, w in (ctx.inputs.plan.get("workloads") or {}).items():
        if w.get("kind") == "agent":
            planned = ctx.plan(
                "workloads", name, "planned_prefix_hit_rate", kind="workload", unit="pct"
            )
            lines += [
                f"The number that carries this section: {name}'s prefix-cache hit rate, planned "
                f"at {planned}"
                f" of the prompt tokens of every request (turn 1 included), as the engines' "
                "prefix-cache counters measure it. Everything downstream — routing "
                "by prefix, KV sizing, the TTFT budget — is designed around it.",
                "",
            ]
    return lines


def hardware(ctx: Context) -> list[str]:
    lines = ctx.section("2. Hardware bill")
    req = ctx.inputs.plan.get("requirements", "hardware") or []
    rows = []
    for i, h in enumerate(ctx.inputs.plan.get("hardware") or []):
        offer: dict[str, Any] = next((o for o in req if o.get("gpu") == h.get("gpu")), {})
        j = req.index(offer) if offer in req else None
        r = ("requirements", "hardware", j) if j is not None else None
        rows.append(
            [
                str(h["gpu"]),
                f"{ctx.plan('hardware', i, 'gpus_used', kind='config')} GPUs in "
                f"{ctx.plan('hardware', i, 'nodes', kind='config')} node(s) of "
                f"{ctx.plan('hardware', i, 'gpus_per_node', kind='config')}",
                str(h.get("pricing", "")),
                ctx.plan(
                    *r,
                    "capex_usd_per_node",
                    kind="price",
                    unit="usd",
                    digits=0,
                    label="capex per node",
                )
                if r and offer.get("capex_usd_per_node")
                else "—",
                ctx.plan(*r, "effective_power_kw_per_node", kind="config", digits=1) + " kW"
                if r
                else "—",
                ctx.plan(
                    "hardware", i, "node_usd_per_hour", kind="price", unit="usd_h", label="node $/h"
                ),
            ]
        )
    lines += table(["GPU", "count", "pricing", "capex per node", "node power", "node all-in"], rows)
    tps = sorted({int(p["tp"]) for p in ctx.inputs.plan.get("pools") or []})
    lines += [
        f"NVLink, not PCIe only: tensor parallelism of {', '.join(f'TP={t}' for t in tps)} "
        "all-reduces every layer's activations, which on NVLink stays within a few hundred "
        "microseconds per step; over PCIe it would eat the ITL budget. `inhouse check topology` "
        "refuses a TP group whose GPUs are not NVLink-joined (deployment playbook, step 2).",
        "",
        f"Weight cache: at least {_weights_gb(ctx)} GB of NVMe per node for the checkpoints "
        "served (their 16-bit size, as the playbook pulls them: an FP8 pool quantizes at "
        "load), mirrored (RAID10) so one drive "
        "does not stop a replica.",
        "",
    ]
    return lines


def _weights_gb(ctx: Context) -> str:
    """The checkpoints the playbook pulls into the node's cache, each model once, at their
    16-bit size: an FP8 pool quantizes its bf16 checkpoint at load (render's startupProbe
    window is sized on the same bytes)."""
    from inhouse.render.layout import checkpoint_bytes
    from inhouse.spec.catalog import get_model

    models = {str(p["hf_id"]) for p in ctx.inputs.plan.get("pools") or []}
    total = sum(checkpoint_bytes(get_model(name)) for name in sorted(models))
    return f"{total / 1e9:,.0f}"


def selection(ctx: Context) -> list[str]:
    lines = ctx.section("3. Model, quantization and engine selection")
    plan = ctx.inputs.plan
    for p in plan.get("pools") or []:
        adapters = p.get("lora_adapters") or []
        lines.append(
            f"* **{p['name']}** ({', '.join(p['serves'])}): {p['hf_id']} at {p['quant']}, KV cache "
            f"{p['kv_cache_dtype']}, TP={p['tp']} on {p['gpu']}, {p['replicas']} replicas, "
            f"`max_num_seqs` {p['max_num_seqs']}, `max_num_batched_tokens` "
            f"{p['max_num_batched_tokens']}."
        )
        for adapter in adapters:
            lines.append(
                f"* **{adapter}**: LoRA adapters on {p['name']}'s base model (Layout A), not a "
                "pool of its own."
            )
    engine = plan.get("engine") or {}
    lines += [
        f"* **Engine**: {engine.get('backend', 'vllm')}.",
        f"* **Router**: `{engine.get('routing_policy', 'cache_aware')}` — prefix-cache-aware, "
        "never round-robin, which would scatter sessions and erase the planned hit rate.",
        "",
        "Runners-up and why they lost:",
        "",
    ]
    search = plan.get("search") or {}
    for key in ("failed_verification", "runners_up", "over_hardware"):
        for item in (search.get(key) or [])[:3]:
            lines.append(f"* {item['layout']} — {item['pools']}: {item['lost_because']}.")
    for item in search.get("rejected_layouts") or []:
        lines.append(f"* {item['layout']}: {'; '.join(item['why'])}.")
    lines += ["", f"vLLM against SGLang: {SGLANG_TRADE}", ""]
    lines += _engine_alternative(ctx)
    return lines


def _engine_alternative(ctx: Context) -> list[str]:
    """SGLang's plan in a sentence: its price, or why it does not fit (and its price on more
    nodes, where the planner found one)."""
    compare = ctx.inputs.compare
    if compare is None:
        return []
    where = "the alternative compared, after section 8"
    for i, alt in enumerate(compare.get("alternatives") or []):
        if alt.get("axis") != "engine":
            continue
        base: tuple[PathPart, ...] = ("alternatives", i)
        lead = f"Planned with SGLang's step-time constants instead ({alt.get('label', '')}), "
        more = alt.get("with_more_nodes") or {}
        why = why_infeasible(alt, ctx.public)
        if alt.get("feasible") is False and "usd_per_hour" not in more:
            return [f"{lead}the same requirements cannot be met ({why}; {where}).", ""]
        if alt.get("feasible") is False:
            base = (*base, "with_more_nodes")
        price = ctx.show(
            compare.figure(
                *base, "usd_per_hour", kind="price", unit="usd_h", label="alternative $/h"
            )
        )
        said = (
            f"the same requirements do not fit this hardware ({why}); on more nodes it costs "
            f"{price}"
            if alt.get("feasible") is False
            else f"the same requirements cost {price}"
        )
        return [f"{lead}{said} ({where}).", ""]
    return []


def capacity(ctx: Context) -> list[str]:
    lines = ctx.section("5. Capacity plan")
    lines += [
        "```mermaid",
        *deployment_diagram(ctx.inputs.plan.data),
        "```",
        "",
        "_The deployment: clients through the L7 edge and the prefix-aware gateway to the engine "
        "replicas, each on its NVLink group, weights from the node's verified NVMe cache._",
        "",
    ]
    rows = []
    for i, p in enumerate(ctx.inputs.plan.get("pools") or []):
        base = ("pools", i)
        placement = "; ".join(f"GPUs {x['gpu_ids']}" for x in p.get("placement", []))
        rows.append(
            [
                p["name"],
                f"{p['replicas']} x TP{p['tp']}",
                placement,
                ctx.plan(
                    *base,
                    "at_peak",
                    "rate_per_replica_per_s",
                    kind="estimate",
                    unit="rate",
                    digits=2,
                ),
                ctx.plan(*base, "at_peak", "batch", kind="estimate"),
                ctx.plan(*base, "kv_budget_tokens", kind="config", unit="tok"),
                ctx.plan(*base, "at_peak", "utilization", kind="estimate", unit="pct"),
            ]
        )
    lines += table(
        [
            "pool",
            "replicas",
            "placement",
            "req/s per replica at peak",
            "decode batch",
            "KV budget per replica",
            "utilization at peak",
        ],
        rows,
    )
    lines += [
        "Headroom: every replica is planned at no more than the utilization cap in steady state, "
        "so a burst or the loss of a peer lands on spare capacity.",
        "",
    ]
    lines += _failover(ctx)
    lines += _cold_start(ctx)
    return lines


def _failover(ctx: Context) -> list[str]:
    lines = ["### Failover and the degraded SLO", ""]
    degraded = ctx.inputs.plan.get("degraded") or []
    if not degraded:
        return [
            *lines,
            "No pool has two replicas; losing one sends its traffic to the fallback.",
            "",
        ]
    for i, d in enumerate(degraded):
        lines.append(f"**{d['pool']}**: {d['failover']}.")
        for workload, stated in (d.get("degraded_slo") or {}).items():
            for metric, label in METRIC.items():
                if stated and metric in stated:
                    lines += ["", _degraded_slo(ctx, i, d["pool"], workload, metric, label)]
        lines.append("")
    return lines


def _degraded_slo(ctx: Context, i: int, pool: str, workload: str, metric: str, label: str) -> str:
    """One degraded-mode commitment, named, with the planner's simulation and, for TTFT, the
    kill-replica drill's measurement (the drill measures nothing else)."""
    base = ("degraded", i)
    target = ctx.plan(
        *base, "degraded_slo", workload, metric, "target_ms", kind="target", unit="ms"
    )
    simulated = ctx.plan(
        *base, "workloads", workload, "p95_ms", BENCH_KEY[metric], kind="estimate", unit="ms"
    )
    if metric == "ttft":
        # The SLO table's row on the same figure (`slo.degraded_rows`), else the drill's own.
        name = f"{label}, one {pool} replica lost"
        row = next((r for r in ctx.rows if r.workload == workload and r.metric == name), None)
        reading = (
            row.measured
            if row is not None
            else measure.drill_check(ctx.inputs.drills, "kill-replica", "degraded", "ttft")[0]
        )
        how = f"; {reading.how}" if reading.how else ""
        measured = (
            "measured by the kill-replica drill: " + ctx.show(reading.figure)
            if reading.figure is not None
            else f"not measured by the kill-replica drill: {reading.why}{how}"
        )
        # The SLO table's verdict on the same figure (one verdict per figure in the document;
        # the drill's own check may bound it differently).
        if row is not None and row.verdict is not None:
            measured += " — held" if row.verdict else " — **missed**"
    else:
        measured = f"not measured: {NO_DRILL_MEASURES}"
    return (
        f"The degraded SLO, named: **{workload} {label} at most {target} while one {pool} "
        f"replica is lost**, restored when the replica is replaced. Simulated by the planner: "
        f"{simulated}; {measured}."
    )


def _cold_start(ctx: Context) -> list[str]:
    from inhouse.render.layout import (
        ENGINE_INIT_S,
        NVME_READ_BYTES_S,
        checkpoint_bytes,
        checkpoint_read_s,
    )
    from inhouse.spec.catalog import get_model

    lines = ["### Cold-start budget", ""]
    for p in ctx.inputs.plan.get("pools") or []:
        model = get_model(str(p["hf_id"]))
        size = checkpoint_bytes(model)
        verify_s = checkpoint_read_s(model)
        load = verify_s + size / NVME_READ_BYTES_S + ENGINE_INIT_S
        figure = Figure(
            load,
            "s",
            "config",
            Source(
                "catalog models.yaml + render/layout.py",
                f"{model.name} 16-bit checkpoint bytes / NVME_READ_BYTES_S, twice (verify, "
                "load) + ENGINE_INIT_S",
            ),
            digits=0,
        )
        lines.append(
            f"* {p['name']}: about {ctx.show(figure)} from `kubectl apply` to first token — "
            f"the {size / 1e9:,.0f} GB checkpoint read twice from NVMe at "
            f"{NVME_READ_BYTES_S / 1e9:g} GB/s (the init containers verify its signature, "
            f"{verify_s} s; the engine loads it{_quantized(p)}), plus {ENGINE_INIT_S} s of "
            "engine start-up (compile, CUDA graphs, KV profiling). From the catalog, not "
            "measured: the simulated stack loads no weights."
        )
    return [*lines, ""]


def _quantized(pool: dict[str, Any]) -> str:
    quant = str(pool.get("quant", ""))
    return f" and quantizes it to {quant}" if quant and quant not in ("bf16", "fp16") else ""


def pools_by_name(plan: dict[str, Any]) -> dict[str, Any]:
    return {p["name"]: p for p in plan.get("pools") or []}

"""The sizing memo: markdown written from `plan.json` alone, so every number traces back to it.

Sections follow the seeds' reference-architecture order: workload characterization, hardware
bill, model/quantization/engine choice, SLO table, capacity plan with the failover arithmetic,
cost sheet with the arithmetic, what would invalidate the plan, risks and assumptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inhouse.plan.memo_availability import availability_lines, availability_summary
from inhouse.plan.memo_failover import degraded_sentence, failover_lines, failover_risks
from inhouse.plan.memo_format import METRIC_NAMES, _ms, _pct, _table, _usd
from inhouse.plan.memo_long import long_prompt_note, metric_label
from inhouse.plan.memo_notes import _break_units, _bucket_note, _length_models, _not_re_forecast
from inhouse.plan.memo_verify import WITHIN_NOISE, any_marginal, interval_note, verification_cell
from inhouse.spec.triggers import Trigger, describe


def render_memo(report: Mapping[str, Any], charts: Mapping[str, str]) -> str:
    lines: list[str] = [f"# Sizing memo: {report['name']}", ""]
    if report.get("description"):
        lines += [f"_{report['description']}_", ""]
    lines += _summary(report)
    lines += _workloads(report)
    lines += _hardware(report)
    lines += _choice(report)
    lines += _slo_table(report, charts)
    lines += _capacity(report)
    if "memory" in charts:
        lines += [f"![memory per GPU]({charts['memory']})", ""]
    lines += _cost(report, charts)
    lines += _sensitivity(report, charts)
    lines += _risks(report)
    lines += _reproduce(report)
    return "\n".join(lines)


def _reproduce(r: Mapping[str, Any]) -> list[str]:
    rep = r.get("reproduce") or {}
    if not rep:
        return []
    lines = ["## Reproduce", "", "```bash"]
    if rep.get("plan"):
        lines.append(rep["plan"])
    lines += list(rep.get("simulate", {}).values())
    lines += ["```", "", f"Note: {rep['note']}.", ""]
    return lines


def _summary(r: Mapping[str, Any]) -> list[str]:
    cost = r["cost"]
    pools = ", ".join(
        f"{p['name']} ({p['replicas']}x {p['model']} {p['quant']} TP{p['tp']} on {p['gpu']})"
        for p in r["pools"]
    )
    one = r["slo_check"].get("1x", {}).get("workloads", {})
    verdict = (
        "meets every SLO at 1x peak in the fleet simulator"
        if one and all(w["pass"] for w in one.values())
        else "was not verified in the simulator"
    )
    if one and any_marginal(r):
        verdict += f" (some {WITHIN_NOISE}: sections 4 and 7)"
    return [
        "## Summary",
        "",
        f"Pools: {pools}. All-in {_usd(cost['usd_per_hour'])}/h "
        f"({_usd(cost['usd_per_month'], 0)}/month). The plan {verdict}; the tables below give "
        "the analytic forecast, the simulated p95s at 1x, 2x and 3x peak, one replica lost, "
        "the cost arithmetic and what would invalidate it. All numbers come from `plan.json`.",
        "",
        *degraded_sentence(r),
        *availability_summary(r),
    ]


def _workloads(r: Mapping[str, Any]) -> list[str]:
    rows = []
    for name, w in r["workloads"].items():
        t = w["traffic"]
        traffic = (
            f"{t['avg_sessions']} avg / {t['peak_sessions']} peak sessions, "
            f"think {t['think_time_s']:g} s"
            if "peak_sessions" in t
            else f"{t['avg_per_s']:.2f} avg / {t['peak_per_s']:.2f} peak req/s"
        )
        p, o = w["prompt_tokens"], w["output_tokens"]
        rows.append(
            [
                name,
                w["kind"],
                traffic,
                f"{p['mean']:,.0f} / {p['p50']:,.0f} / {p['p95']:,.0f}",
                f"{o['mean']:,.0f} / {o['p50']:,.0f} / {o['p95']:,.0f}",
                f"{_pct(w['planned_prefix_hit_rate'])} (ideal {_pct(w['ideal_prefix_hit_rate'])})",
            ]
        )
    return [
        "## 1. Workload characterization",
        "",
        "Sampled from the same seeded generators the simulator replays (`workloads` in plan.json).",
        "",
        *_length_models(r),
        *_table(
            [
                "workload",
                "kind",
                "traffic",
                "prompt mean/p50/p95",
                "output mean/p50/p95",
                "prefix hit planned",
            ],
            rows,
        ),
    ]


def _bill(h: Mapping[str, Any]) -> str:
    """What the GPUs in use cost per hour, with the arithmetic. NOTE: `arithmetic` in plan.json
    is one node's; beside 33 rented GPUs it read `8 GPUs x $3.00/GPU-h = $24.00/h`."""
    if h["pricing"] == "hourly":
        total = h["gpus_used"] * h["usd_per_gpu_hour"]
        return f"{h['gpus_used']} GPUs x {_usd(h['usd_per_gpu_hour'])}/GPU-h = {_usd(total)}/h"
    if h["nodes"] == 1:
        return str(h["arithmetic"])
    total = h["nodes"] * h["node_usd_per_hour"]
    return f"{h['arithmetic']}; x {h['nodes']} nodes = {_usd(total)}/h"


def _hardware(r: Mapping[str, Any]) -> list[str]:
    rows = [
        [
            h["gpu"],
            str(h["gpus_used"]),
            str(h["nodes"]),
            h["pricing"],
            _usd(h["usd_per_gpu_hour"]),
            _bill(h),
        ]
        for h in r["hardware"]
    ]
    return [
        "## 2. Hardware bill",
        "",
        *_table(["GPU", "GPUs used", "nodes", "pricing", "$/GPU-h", "arithmetic"], rows),
        "Tensor-parallel groups sit inside one NVLink domain, aligned (TP4 on GPUs 0-3 or 4-7): "
        "all-reduce at TP>1 needs NVLink to stay within a few hundred microseconds per step.",
        "",
    ]


def _choice(r: Mapping[str, Any]) -> list[str]:
    lines = ["## 3. Model, quantization and engine", ""]
    for p in r["pools"]:
        mem = p["memory_gib_per_gpu"]
        lines.append(
            f"* **{p['name']}** ({p['role']}, serves {', '.join(p['serves'])}"
            + (f"; LoRA adapters {', '.join(p['lora_adapters'])}" if p["lora_adapters"] else "")
            + f"): {p['hf_id']} {p['quant']}, KV {p['kv_cache_dtype']}, TP{p['tp']} on "
            f"{p['gpu']}, `max_num_batched_tokens` {p['max_num_batched_tokens']}, "
            f"`max_num_seqs` {p['max_num_seqs']}, `max_model_len` {p['max_model_len']:,}. Per GPU: "
            f"{mem['usable']:.1f} GiB usable = {mem['weights']:.1f} weights + "
            f"{mem['reserve']:.1f} reserve + {mem['kv_cache']:.1f} KV "
            f"({p['kv_budget_tokens']:,} tokens per replica)."
        )
    s = r["search"]
    lines += [
        "",
        f"Chosen layout: {s['chosen']['layout']}.",
        "",
        f"Engine: {r['engine']['backend']}, with `{r['engine']['routing_policy']}` routing so "
        "that sessions and repeated prefixes return to the replica holding them. "
        f"Searched {s['configurations_sized']} pool configurations over "
        f"{len(s['layouts']) + len(s['rejected_layouts'])} layouts; "
        f"{s['verification_rounds']} simulator round(s).",
        "",
        "Why the runners-up lost:",
        "",
    ]
    for item in s["failed_verification"]:
        lines.append(f"* {item['layout']} — {item['pools']}: {item['lost_because']}.")
    for item in s["runners_up"][:3]:
        lines.append(f"* {item['layout']} — {item['pools']}: {item['lost_because']}.")
    for item in s["over_hardware"][:3]:
        lines.append(f"* {item['layout']} — {item['pools']}: {item['lost_because']}.")
    for item in s["rejected_layouts"]:
        lines.append(f"* {item['layout']}: {'; '.join(item['why'])}.")
    return [*lines, ""]


def _slo_table(r: Mapping[str, Any], charts: Mapping[str, str]) -> list[str]:
    checks = r["slo_check"]
    multiples = [k for k in checks if k.endswith("x")]
    rows = []
    for workload, targets in checks["targets"].items():
        long = (checks.get("long_prompts") or {}).get(workload)
        if long is not None:
            targets = {**targets, "long_ttft": long["ttft"]}
        for metric, t in targets.items():
            row = [
                workload,
                metric_label(metric, long),
                f"< {_ms(t['target_ms'])}",
                _ms(t["alarm_ms"]),
            ]
            one = checks.get("1x", {}).get("workloads", {}).get(workload, {}).get("metrics", {})
            row.append(_ms(one.get(metric, {}).get("analytic_p95_ms")))
            for m in multiples:
                item = checks[m]["workloads"][workload]["metrics"].get(metric, {})
                if m == "1x":
                    row.append(verification_cell(item))
                    continue
                mark = "ok" if item.get("pass") else "MISS"
                row.append(f"{_ms(item.get('p95_ms'))} {mark}")
            rows.append(row)
    lines = ["## 4. SLO commitments", ""]
    lines += _table(
        ["workload", "metric", "target", "alarm at", "analytic"]
        + [f"simulated {m}" for m in multiples],
        rows,
    )
    lines.append(
        "Analytic: the planner's forecast at 1x peak. Simulated: the fleet simulator with the "
        "production router, p95 over requests after warm-up. 2x and 3x peak show where the "
        "stack stops meeting the SLOs; they are not commitments."
    )
    lines += interval_note(r)
    lines += long_prompt_note(r)
    if "latency" in charts:
        lines += ["", f"![p95 latency against load]({charts['latency']})"]
    return [*lines, ""]


def _capacity(r: Mapping[str, Any]) -> list[str]:
    rows = []
    for p in r["pools"]:
        a = p["at_peak"]
        placement = "; ".join(f"node {x['node']}: GPUs {x['gpu_ids']}" for x in p["placement"])
        rows.append(
            [
                p["name"],
                f"{p['replicas']} x TP{p['tp']} = {p['num_gpus']} GPUs",
                placement,
                f"{a['rate_per_replica_per_s']:.2f}",
                f"{a['batch']:.0f} (p95 {a['batch_p95']:.0f})",
                _pct(a["utilization"]),
                _pct(a["kv_utilization_p95"]),
                p["limited_by"],
            ]
        )
    lines = ["## 5. Capacity plan", ""]
    lines += _table(
        [
            "pool",
            "replicas",
            "placement",
            "req/s per replica",
            "batch",
            "utilization",
            "KV p95",
            "sized by",
        ],
        rows,
    )
    lines += [
        "Little's law per replica: in-flight requests = rate x latency; the batch above is the "
        "decode batch that law gives at the forecast step time.",
        "",
    ]
    return [*lines, *availability_lines(r), *failover_lines(r)]


def _cost(r: Mapping[str, Any], charts: Mapping[str, str]) -> list[str]:
    c = r["cost"]
    lines = ["## 6. Cost sheet", ""]
    lines += [_hardware_cost_line(h) for h in r["hardware"]]
    lines += [
        f"* Stack all-in: {_usd(c['usd_per_hour'])}/h x {c['hours_per_month']:.0f} h = "
        f"{_usd(c['usd_per_month'], 0)}/month; capex {_usd(c['capex_usd'], 0)}.",
        f"* {c['formula']}.",
        "",
    ]
    lines += _workload_cost_table(c)
    lines += _workload_cost_notes(c)
    lines += _api_breakeven(c)
    if c.get("effective_usd_per_million_tokens_with_idle_hours") is not None:
        lines.append(
            "Effective stack cost with idle hours: "
            f"{_usd(c['effective_usd_per_million_tokens_with_idle_hours'], 3)} per 1M tokens."
        )
    if "cost" in charts:
        lines += ["", f"![monthly cost against APIs]({charts['cost']})"]
    return [*lines, ""]


def _hardware_cost_line(h: Mapping[str, Any]) -> str:
    """One GPU type's $/h: rented GPUs x rent, or owned nodes with their all-in arithmetic."""
    if h["pricing"] == "hourly":
        total = h["gpus_used"] * h["usd_per_gpu_hour"]
        return (
            f"* {h['gpu']}, rented: {h['gpus_used']} GPUs x "
            f"{_usd(h['usd_per_gpu_hour'])}/GPU-h = {_usd(total)}/h."
        )
    return f"* {h['gpu']}, {h['nodes']} node(s) of {h['gpus_per_node']}: {h['arithmetic']}."


def _workload_cost_table(c: Mapping[str, Any]) -> list[str]:
    """Per workload: its $/h share, average load, $/1M with its arithmetic, $/request."""
    rows = []
    for name, w in c["workloads"].items():
        per_m = w["usd_per_million_tokens"]
        load = w["at_average_load"]
        tps = load["input_tokens_per_s"] + load["output_tokens_per_s"]
        rows.append(
            [
                name,
                _usd(w["usd_per_hour"]),
                f"{load['requests_per_s']:.2f}",
                f"{load['input_tokens_per_s']:,.0f} / {load['output_tokens_per_s']:,.0f}",
                f"{_usd(w['usd_per_hour'])} / ({tps:,.0f} x 3600) x 1e6 = "
                f"{_usd(per_m['blended'], 3)}",
                _usd(per_m["input"], 3),
                _usd(per_m["output"], 3),
                _usd(w["usd_per_request"], 5),
                _usd(w.get("usd_per_request_with_idle_hours"), 5),
            ]
        )
    return _table(
        [
            "workload",
            "$/h share",
            "req/s (avg)",
            "in / out tok/s",
            "$/1M blended",
            "$/1M in",
            "$/1M out",
            "$/request at load",
            "$/request with idle hours",
        ],
        rows,
    )


def _workload_cost_notes(c: Mapping[str, Any]) -> list[str]:
    """How the $/h is shared out, what idle hours do to $/request, and the cached input share."""
    lines = [
        "A pool's $/h is split between the workloads it serves by the replica time each takes, "
        "then between input and output by prefill versus decode time. The $/1M and $/request "
        "at load hold in an active hour at the average rate; the stack is paid for all "
        f"{c['hours_per_month']:.0f} h of the month and traffic flows "
        f"{c['active_hours_per_month']:.0f} h of it, so a month's bill over a month's requests "
        "is the $/request with idle hours ($/h share x "
        f"{c['hours_per_month']:.0f} h / requests a month)."
    ]
    cached = [
        f"{name}: {w['at_average_load']['cached_input_tokens_per_s'] / tin:.0%}"
        for name, w in c["workloads"].items()
        if (tin := w["at_average_load"]["input_tokens_per_s"]) > 0
    ]
    if cached:
        lines.append(
            "Input tokens count every prompt token, cached or not "
            f"({', '.join(cached)} from the prefix cache): the prefill time they cost is "
            "spread over all of them."
        )
    lines.append("")
    return lines


def _api_breakeven(c: Mapping[str, Any]) -> list[str]:
    """Each API's $/month against the stack's, with break-even, and the rent if released."""
    api_rows = []
    for api, spend in c["api_usd_per_month"].items():
        months = c["breakeven_months"].get(api)
        if months is None:
            be = "never at this usage"
        elif months == 0:
            be = "from month one"
        else:
            be = f"{months:.1f} months"
        api_rows.append([api, _usd(spend, 0), _usd(c["usd_per_month"], 0), be])
    if not api_rows:
        return []
    lines = [
        f"Against APIs, at the average rates for {c['active_hours_per_month']:.0f} active "
        "hours a month (cached input at the cached price):",
        "",
    ]
    lines += _table(["API", "API $/month", "stack $/month", "break-even"], api_rows)
    if c.get("rented_usd_per_month_active_hours_only") is not None:
        lines.append(
            "Rented GPUs released outside the active hours would cost "
            f"{_usd(c['rented_usd_per_month_active_hours_only'], 0)}/month "
            f"({c['active_hours_per_month']:.0f} h) instead of "
            f"{_usd(c['usd_per_month'], 0)}; the plan assumes 24/7."
        )
        lines.append("")
    lines.append("Break-even = capex / (API $/month - (power + ops + rent) $/month).")
    lines.append("")
    return lines


def _sensitivity(r: Mapping[str, Any], charts: Mapping[str, str]) -> list[str]:
    rows = []
    for s in r["sensitivity"]:
        first = s.get("first_break")
        if first and first.get("predicted_ms") is None:
            broke = (
                f"{first['workload']} overloaded: queues grow without bound "
                f"(target {METRIC_NAMES[first['metric']]} {_ms(first['target_ms'])})"
            )
        elif first:
            broke = (
                f"{first['workload']} {METRIC_NAMES[first['metric']]} "
                f"{_ms(first['predicted_ms'])} vs {_ms(first['target_ms'])}"
                + (f" (+{first['over_by']:.0%})" if first.get("over_by") is not None else "")
            )
        elif (s.get("same_layout") or {}).get("fits") is False:
            # NOTE: a layout that does not fit has no re-forecast and no breach; "holds" read
            # as "BF16 would do on this layout" for the CRM node, which BF16 does not fit.
            why = "; ".join(p.split(". ")[0] for p in s["same_layout"]["problems"])
            broke = f"does not fit: {why}"
        else:
            broke = "holds"
        at = s.get("breaks_at_size")
        if s["name"] == "no_fp8":
            replan = s.get("replan", {})
            at_text = (
                f"re-plan: {_usd(replan.get('usd_per_hour'))}/h"
                if replan.get("usd_per_hour") is not None
                else f"re-plan: none fits ({replan.get('why_none')})"
            )
        else:
            at_text = "—" if at is None else f"{at:.2f}x{_break_units(s['name'], at, r)}"
        rows.append([s["change"], broke, at_text, trigger_text(s)])
    lines = ["## 7. What would invalidate the plan", ""]
    lines += _table(
        ["change", "first SLO to break (full change)", "breaks at", "trigger to re-plan"], rows
    )
    lines.append(
        "Analytic re-forecasts of the chosen stack at its replica counts (scaled by the "
        "simulator's corrections where the plan needed them); 'breaks at' is the size of the "
        "change at which the first SLO breaks. Each trigger is a ticket alert in `inhouse "
        "render`'s rules at the same level (InhousePrefixHitRateLow and InhouseReplan*, their "
        "`change` label naming the row)."
    )
    lines += _bucket_note(r)
    lines += _not_re_forecast(r)
    if "sensitivity" in charts:
        lines += ["", f"![SLO ratios under each change]({charts['sensitivity']})"]
    return [*lines, ""]


def trigger_text(row: Mapping[str, Any]) -> str:
    """A sensitivity row's triggers in words, from the same data `inhouse render` alerts on."""
    found = [Trigger.model_validate(t) for t in row.get("triggers", ())]
    return "; ".join(describe(t) for t in found) if found else str(row["trigger"])


def _risks(r: Mapping[str, Any]) -> list[str]:
    lines = ["## 8. Risks and assumptions", "", *failover_risks(r)]
    for s in r["sensitivity"]:
        if s.get("first_break") and s.get("breaks_at_size") is not None:
            lines.append(
                f"* {s['change']}: breaks at {s['breaks_at_size']:.2f}x"
                f"{_break_units(s['name'], s['breaks_at_size'], r)}; watch: {trigger_text(s)}."
            )
    lines += [f"* {a}" for a in r["assumptions"]]
    return [*lines, ""]

"""The licence memo, the benchmark report and the runbook (three of the six deliverables; the
sizing memo is sections 1-5 of the document, the playbook and cost sheet have modules of their
own)."""

from __future__ import annotations

from inhouse.errors import SpecError
from inhouse.report import measure
from inhouse.report.context import Context, table
from inhouse.report.figures import Figure, Source
from inhouse.report.inputs import BenchRun
from inhouse.report.load import run_load
from inhouse.report.sections_ops import drills
from inhouse.spec.catalog import get_model
from inhouse.spec.licenses import get_licence

# The seeds' bench report: every latency at p50, p95 and p99.
LATENCIES = (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2el", "e2e"))
BENCH_ROWS = (
    *((f"p{p}_{key}_ms", f"p{p} {label}", "ms") for key, label in LATENCIES for p in (50, 95, 99)),
    ("request_throughput", "requests/s", "rate"),
    ("output_throughput", "output tokens/s", "rate"),
    ("prefix_cache_hit_rate_server", "prefix hit (server)", "pct"),
    ("prefix_cache_hit_rate_client", "prefix hit (client)", "pct"),
)


def _classes(classes: tuple[str, ...]) -> str:
    words = {
        "production": "every production tenant (internal and customer-facing)",
        "research": "research and evaluation only: no production tenant",
    }
    return "; ".join(words[c] for c in classes)


def license_memo(ctx: Context) -> str:
    lines = [f"# License compliance memo: {ctx.customer()}", ""]
    lines += [
        "Per model and adapter the stack serves: licence, redistribution rights, use "
        "restrictions, attribution, and which tenant classes may use it. From the licence "
        "catalog (`spec/data/licenses.yaml`), each entry with the licence text it was read from. "
        "A summary for procurement, not legal advice: the licence text decides.",
        "",
    ]
    rows = []
    details: list[str] = []
    for p in ctx.inputs.plan.get("pools") or []:
        try:
            model = get_model(str(p["hf_id"]))
            licence = get_licence(model.license)
        except SpecError as exc:
            rows.append([str(p["hf_id"]), "unknown", str(exc), "—", "—"])
            continue
        rows.append(
            [
                f"{p['hf_id']} ({p['name']} pool)",
                licence.name,
                "yes" if licence.commercial_use else "no",
                _classes(licence.tenant_classes),
                "; ".join(licence.sources),
            ]
        )
        details += [
            f"## {p['hf_id']}: {licence.name}",
            "",
            f"* **Redistribution**: {licence.redistribution}",
            *[f"* **Restriction**: {r}" for r in licence.use_restrictions],
            f"* **Attribution**: {licence.attribution}",
            f"* **Tenant classes**: {_classes(licence.tenant_classes)}.",
            f"* **Sources**: {'; '.join(licence.sources)}.",
            "",
        ]
        for adapter in p.get("lora_adapters") or []:
            rows.append(
                [
                    f"adapter {adapter} (on {p['hf_id']})",
                    f"derivative of the base: {licence.name}",
                    "yes" if licence.commercial_use else "no",
                    _classes(licence.tenant_classes),
                    "the base model's licence; the adapter's training data terms are the "
                    "customer's own and are not in the catalog: record them here",
                ]
            )
    lines += table(
        ["model or adapter", "licence", "commercial use", "tenant classes", "sources"], rows
    )
    lines += details
    lines += [
        "## Weight export and the air gap",
        "",
        "The weights enter the building once, into the signed registry, and never leave it. "
        "Whether moving them across a border needs an export licence is not assessed here: ask "
        "counsel before the first transfer.",
        "",
    ]
    return "\n".join(lines)


def _run_table(ctx: Context, run: BenchRun) -> list[str]:
    rows = []
    shared = measure.shared_counters(run, ctx.inputs.benches)
    for key, label, unit in BENCH_ROWS:
        if run.is_cold_probe and key == "prefix_cache_hit_rate_server":
            continue  # the engines' counters over the probe count the run beside it
        figure = run.result.figure(key, kind="measured", unit=unit)  # type: ignore[arg-type]
        if figure is not None:
            shown = ctx.show(figure)
            if key == "prefix_cache_hit_rate_server" and shared:
                shown += f" — not this run's own: {shared}"
            rows.append([label, shown, f"`{run.result.name}` → `{key}`"])
    for metric, label in (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e", "e2e")):
        reading = measure.worst_p95([run], metric)
        if reading.figure is not None:
            source = reading.figure.source
            rows.append(
                [
                    f"p95 {label} after the warm-up",
                    ctx.show(reading.figure),
                    f"`{source.file}` → `{source.path}`",
                ]
            )
    warmup = Figure(
        measure.run_warmup_s(run),
        "s",
        "config",
        Source(run.result.name, "20% of workload.duration_s (else of the arrivals' span), ≤ 30 s"),
    )
    return [
        "Percentiles from result.json count every request of the run, its warm-up included "
        "(`vllm bench serve`'s definitions); section 4, as the planner's check, counts the "
        f"requests scheduled after its {ctx.show(warmup)} warm-up (the first 20% of the run, "
        'at most 30 s), and so do the rows marked "after the warm-up".',
        "",
        *table(["metric", "value", "source"], rows),
    ]


def _load(ctx: Context, run: BenchRun) -> list[str]:
    """What the run drove against the plan's peak (the seeds: "at target concurrencies")."""
    load = None if run.is_cold_probe else run_load(ctx.inputs, run)
    if load is None:
        return []
    unit = "concurrent sessions" if load.sessions else "req/min offered"
    peak = ctx.show(load.peak) + ("" if load.sessions else " req/min")
    below = " **Below the planned peak**: section 4 leaves this run out." if load.below_peak else ""
    return [f"Load: {ctx.show(load.driven)} {unit} (the plan's peak: {peak}).{below}", ""]


def bench_report(ctx: Context) -> str:
    ctx.ledger.section = "Benchmark report"
    lines = [f"# Benchmark report: {ctx.customer()}", ""]
    lines += [
        "Every run behind section 4 of the reference architecture, with `vllm bench serve`'s "
        "metric names and definitions (docs/bench.md).",
        "",
    ]
    if not ctx.inputs.benches:
        return "\n".join([*lines, "No bench runs given (`inhouse report --bench DIR`).", ""])
    for run in ctx.inputs.benches:
        workload = run.workload(ctx.inputs.workload_names) or "unassigned"
        what = "cold-prefix probe" if run.is_cold_probe else "planned shape"
        lines += [f"## {run.name} — workload {workload} ({what})", ""]
        completed = run.result.figure("completed", kind="measured", unit="count")
        failed = run.result.figure("failed", kind="measured", unit="count")
        lines += [
            f"Completed {ctx.show(completed)}, failed {ctx.show(failed)}; "
            f"target `{run.result.get('run', 'target') if not ctx.public else 'GATEWAY'}`.",
            "",
        ]
        if run.result.get("client_bottleneck"):
            # NOTE: the reasons quote measured and scheduled rates and lags verbatim
            # ("achieved 15.2 req/s of 16.7 req/s scheduled"): not in the public version.
            reasons = "" if ctx.public else "; ".join(run.result.get("client", "reasons") or [])
            why = f" ({reasons})" if reasons else ""
            lines += [
                f"**The client was a bottleneck in this run**{why}: its latencies include "
                "client delay.",
                "",
            ]
        lines += _load(ctx, run)
        if not ctx.public:
            lines += [f"Command: `{run.result.get('run', 'command')}`", ""]
        lines += _run_table(ctx, run)
        if run.is_cold_probe:
            lines += [
                "The prefix hit rate is the probe's own (client side): the engines' counters "
                "during a probe also count the run beside it.",
                "",
            ]
    return "\n".join(lines)


def runbook(ctx: Context) -> str:
    lines = [f"# Runbook: {ctx.customer()}", ""]
    lines += [
        "Operations guide: the seven drills (what each breaks, what to expect, the red flags, "
        "what was observed, the post-mortem template), then every alert's entry as `inhouse "
        "render` wrote it.",
        "",
    ]
    lines += drills(ctx)
    render = ctx.inputs.render
    if render is not None and "runbook.md" in render.files:
        text = render.files["runbook.md"]
        lines += ["## Alerts", "", text.split("\n", 1)[1] if text.startswith("# ") else text]
    return "\n".join(lines)

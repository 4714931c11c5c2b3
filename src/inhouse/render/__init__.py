"""`inhouse render`: a stack file in, what an operator applies, watches and is paged by out.

`render_stack(stack, options)` is pure: it returns every file as text keyed by its path under the
output directory; only the CLI writes them. See docs/render.md for the files and their checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.launch.engine_args import checkpoint_quant, vllm_serve_args
from inhouse.render import layout
from inhouse.render.alerts_slo import GATEWAY_LATENCIES, attached_pools
from inhouse.render.checks import check_renderable
from inhouse.render.grafana_boards import render_grafana
from inhouse.render.k8s_cluster import render_cluster
from inhouse.render.k8s_engine import namespace_of, render_engines
from inhouse.render.k8s_exporters import render_exporters
from inhouse.render.k8s_logging import render_logging
from inhouse.render.k8s_tracing import render_tracing_and_grafana, tracing_notes, with_tracing
from inhouse.render.options import RenderOptions
from inhouse.render.prometheus import layout_rules, rule_files
from inhouse.render.prometheus_config import render_prometheus_config
from inhouse.render.runbook import render_runbook
from inhouse.render.vllm import render_vllm_script
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.quant import normalize_quant
from inhouse.spec.stack import PoolSpec, StackSpec

__all__ = ["RenderOptions", "Rendered", "render_stack"]

BARE_METAL_BASE_PORT = 8000
# Quantizations vLLM reads from a pre-quantized checkpoint's config (render passes no
# --quantization for them), and the words that name such a checkpoint (gpt-oss ships MXFP4).
CHECKPOINT_QUANT_HINTS = {
    "w4a16": ("awq", "gptq", "int4", "w4a16"),
    "int8": ("int8", "w8a8"),
    "fp4": ("fp4", "gpt-oss"),
}


@dataclass(frozen=True, slots=True)
class Rendered:
    files: dict[str, str]
    notes: tuple[str, ...]


def render_stack(stack: StackSpec, options: RenderOptions | None = None) -> Rendered:
    options = options or RenderOptions()
    check_renderable(stack, layout.engine_layout(stack))
    files: dict[str, str] = {}
    # NOTE: the bare-metal scripts run exactly what `inhouse up` runs; only the cluster's
    # manifests send traces to the in-cluster Tempo (`with_tracing`).
    for pool in layout.engine_pools(stack):
        files[f"vllm/{pool.name}.sh"] = render_vllm_script(
            stack, pool, base_port=BARE_METAL_BASE_PORT
        )
    stack = with_tracing(stack, options)
    ns = namespace_of(stack, options)
    engines = layout.engine_layout(stack)  # the traced stack's: derived once, passed to all
    rules = layout_rules(stack, engines, ns, options)
    files.update(render_engines(stack, engines, options))
    files.update(render_cluster(stack, engines, rules, options))
    files.update(rule_files(rules, options.runbook_url))
    files.update(render_prometheus_config(stack, engines, ns, options))
    files.update(render_exporters(stack, options))
    files.update(render_logging(stack, ns, options))
    dashboards = render_grafana(stack, engines)
    files.update(dashboards)
    files.update(render_tracing_and_grafana(stack, options, dashboards))
    _, alerts = rules
    files["runbook.md"] = render_runbook(stack, engines, alerts, ns)
    engine_args = [vllm_serve_args(stack, pool, 0, BARE_METAL_BASE_PORT) for pool in engines.pools]
    notes = render_notes(stack, engines) + tracing_notes(stack, engine_args, options)
    return Rendered(dict(sorted(files.items())), tuple(notes))


def render_notes(stack: StackSpec, engines: layout.EngineLayout) -> list[str]:
    """Things the operator should know about what was rendered."""
    notes = []
    e2e_all = layout.planned_e2e_s(stack)
    drain = parse_gateway(stack.gateway).proxy.drain_timeout_s
    if e2e_all is not None and drain < e2e_all:
        notes.append(
            f"gateway: proxy.drain_timeout_s {drain:g} s is below the plan's longest p95 e2e "
            f"{e2e_all:.1f} s: a drain cuts longer streams; raise it in the gateway section"
        )
    if not stack.workloads:
        notes += attached_pool_notes(stack)
    for pool in engines.pools:
        if pool.slo is None:
            d = layout.DEFAULT_SLO
            notes.append(
                f"pool {pool.name}: no `slo` section; alerts use the defaults (TTFT p95 "
                f"{d.ttft_p95_ms:g} ms paging at {d.ttft_alarm_ms:g} ms, ITL p95 "
                f"{d.itl_p95_ms:g} ms paging at {d.itl_alarm_ms:g} ms, availability "
                f"{d.availability:g})"
            )
        e2e = layout.planned_e2e_s(stack, pool)
        if e2e is not None and pool.knobs.shutdown_timeout_s < e2e:
            notes.append(
                f"pool {pool.name}: knobs.shutdown_timeout_s {pool.knobs.shutdown_timeout_s} s "
                f"is below the plan's p95 e2e {e2e:.1f} s: vLLM's drain cuts longer requests; "
                "raise it (`inhouse plan` writes at least the p95)"
            )
        quant_note = checkpoint_quant_note(pool)
        if quant_note:
            notes.append(quant_note)
        if engines.single_node and pool.tp > 1 and not pool.gpu_ids:
            notes.append(
                f"pool {pool.name}: TP={pool.tp} without gpu_ids; the device plugin picks the "
                "GPUs and the check-gpu-topology init container verifies they are NVLink-joined"
            )
        if not engines.single_node and pool.gpu_ids:
            notes.append(
                f"pool {pool.name}: gpu_ids are for a single node; on several nodes the "
                f"device plugin picks the GPUs (vllm/{pool.name}.sh still pins them)"
            )
    return notes


def attached_pool_notes(stack: StackSpec) -> list[str]:
    """A stack without workloads: what its attached (`url`) pools' latency alerts, on the
    gateway's series, rest on, and what they cannot cover."""
    notes = []
    for pool in attached_pools(stack):
        where = f"pool {pool.name} (engine url)"
        slo = layout.slo_of(pool)
        if pool.slo is None:
            d = layout.DEFAULT_SLO
            notes.append(
                f"{where}: no `slo` section; its alerts on the gateway's series use the defaults "
                f"(TTFT p95 {d.ttft_p95_ms:g} ms paging at {d.ttft_alarm_ms:g} ms, availability "
                f"{d.availability:g})"
            )
        elif all(slo.alarm_ms(key) is None for key in GATEWAY_LATENCIES):
            notes.append(
                f"{where}: its slo states no TTFT or e2e target, so it has no latency alert; "
                f"set pools[{pool.name}].slo.ttft_p95_ms (and ttft_alarm_ms to page above it)"
            )
        if pool.slo is not None and slo.alarm_ms("itl") is not None:
            notes.append(
                f"{where}: slo.itl_* is not alerted: render does not scrape attached engines "
                "and the gateway does not measure inter-token latency"
            )
    return notes


def checkpoint_quant_note(pool: PoolSpec) -> str | None:
    """A pool whose `quant` vLLM reads from the checkpoint, on a 16-bit checkpoint: served at
    16 bits, not as planned. Its config.json says so where it was read (a local model
    directory); else its name, when it does not say it is quantized."""
    quant = normalize_quant(pool.quant).name
    hints = CHECKPOINT_QUANT_HINTS.get(quant)
    if hints is None:
        return None
    stored = checkpoint_quant(pool)
    if stored is not None and stored != "none":
        return None
    names = [pool.model, *([pool.weights.name] if pool.weights and pool.weights.name else [])]
    if stored is None and any(h in n.lower() for n in names for h in hints):
        return None
    why = (
        "its config.json has no quantization_config"
        if stored is not None
        else f"does not look like a {quant} checkpoint"
    )
    return (
        f"pool {pool.name}: quant {pool.quant} renders no --quantization (vLLM reads the scheme "
        f"from the checkpoint's config), and {pool.model} {why}: a 16-bit one would load at "
        "16 bits, more memory than the plan sized; point `model` at the quantized checkpoint"
    )

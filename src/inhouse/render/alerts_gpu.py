"""GPU hardware alerts from dcgm-exporter: ECC double-bit errors and fatal XIDs page (hardware
retirement path); temperature and power at the limit, and HBM bandwidth below 80% of what
decode reaches while the GPU is busy, file tickets. The ECC counter and the XID
count are not in dcgm-exporter's default collectors: render ships a collectors ConfigMap that
enables them (k8s/dcgm-exporter-counters.yaml).
"""

from __future__ import annotations

from inhouse.perf.constants import get_engine_constants
from inhouse.render.alerts import Alert, Case, RunbookEntry, Series
from inhouse.render.layout import EngineLayout, nvml_name
from inhouse.spec.catalog import get_gpu

GROUP = "inhouse-gpus"
GPU_TEMP_C = 85
POWER_LIMIT_SHARE = 0.98
FATAL_XIDS = ("48", "79", "95")
# HBM bandwidth below this share of expected during load files a ticket (the seeds' 80%).
HBM_EXPECTED_SHARE = 0.8
# "During load": kernels run at least this share of the time (DCGM_FI_DEV_GPU_UTIL, %).
HBM_LOAD_UTIL_PCT = 80
# dcgm-exporter releases label the host `Hostname`; its main branch renamed it `hostname`.
WHERE = "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.Hostname }}{{ $labels.hostname }}"


def gpu_labels(model_name: str) -> dict[str, str]:
    return {"gpu": "0", "UUID": "GPU-0f1e2d3c", "modelName": model_name, "Hostname": "gpu-node-1"}


def _retire_steps(what: str) -> tuple[str, ...]:
    return (
        f"Cordon the node (`kubectl cordon NODE`): {what}.",
        "Drain the engine pods on that GPU (`kubectl delete pod`); on a single node, the pool "
        "runs degraded on the other NVLink group until the GPU is replaced.",
        "Collect `nvidia-smi -q` and `nvidia-bug-report.sh` output for the vendor RMA.",
    )


def ecc_alert(model_name: str) -> Alert:
    labels = gpu_labels(model_name)

    def series(dbe: str) -> tuple[Series, ...]:
        return (
            Series(labels, dbe, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
            Series(labels, "0x10", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"),
        )

    return Alert(
        name="InhouseGPUDoubleBitECC",
        group=GROUP,
        expr="increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0\n"
        "or\nincrease(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[10m]) > 0",
        hold="0s",
        severity="page",
        summary=f"{WHERE}: uncorrectable (double-bit) ECC error",
        description="Memory corruption the GPU could not correct: results on this GPU are no "
        "longer trusted. Hardware retirement path.",
        runbook=RunbookEntry(
            meaning="The GPU's HBM reported an uncorrectable ECC error (or had to remap a row "
            "for one). The process using it usually dies with XID 48; if not, it may compute "
            "on corrupt memory.",
            first_promql="increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[1h]) > 0",
            mitigations=_retire_steps("no new pod may land on the faulty GPU"),
            escalate="Always: file the hardware retirement / RMA ticket with the vendor now, and "
            "tell the capacity owner the node runs degraded.",
        ),
        cases=(
            Case("one double-bit error", "1m", series("0 0 0 1 1 1 1 1 1 1"), "4m", labels),
            Case("no errors", "1m", series("0x10"), "9m", None),
        ),
    )


def xid_alert(model_name: str) -> Alert:
    labels = gpu_labels(model_name)
    gauge = "DCGM_FI_DEV_XID_ERRORS"
    fatal = "|".join(FATAL_XIDS)
    return Alert(
        name="InhouseGPUFatalXid",
        group=GROUP,
        expr=" or ".join(f"{gauge} == {x}" for x in FATAL_XIDS)
        + f'\nor\nDCGM_EXP_XID_ERRORS_COUNT{{xid=~"{fatal}"}} > 0',
        hold="0s",
        severity="page",
        summary=f"{WHERE}: XID 48/79/95 (hardware fault)",
        description="XID 48 is a double-bit ECC error, 79 the GPU fell off the bus, 95 an "
        "uncontained ECC error: the GPU needs a reset or replacement.",
        runbook=RunbookEntry(
            meaning="The driver logged a fatal XID for this GPU. The engine using it is dead or "
            "about to be; the GPU will not recover without a reset. DCGM_FI_DEV_XID_ERRORS "
            "holds the last XID until the exporter restarts, so the alert stays up until then.",
            first_promql="DCGM_FI_DEV_XID_ERRORS != 0",
            mitigations=(
                *_retire_steps("the GPU is unusable until reset"),
                "After a reset (`nvidia-smi -r -i N` with no processes, or a node reboot) "
                "restart dcgm-exporter to clear the gauge.",
            ),
            escalate="XID 79 or a repeat XID 48/95 on the same GPU: RMA with the vendor.",
        ),
        cases=(
            Case("XID 79", "1m", (Series(labels, "0 0 79 79 79", gauge),), "3m", labels),
            Case(
                "XID 13 (application error)",
                "1m",
                (Series(labels, "0 13 13 13 13", gauge),),
                "3m",
                None,
            ),
        ),
    )


def temperature_alert(model_name: str) -> Alert:
    labels = gpu_labels(model_name)
    metric = "DCGM_FI_DEV_GPU_TEMP"
    return Alert(
        name="InhouseGPUTemperatureHigh",
        group=GROUP,
        expr=f"{metric} > {GPU_TEMP_C}",
        hold="5m",
        severity="ticket",
        summary=f"{WHERE} above {GPU_TEMP_C} C for 5 minutes",
        description="The GPU will throttle its clocks: decode slows and ITL rises.",
        runbook=RunbookEntry(
            meaning=f"The GPU core has been above {GPU_TEMP_C} C for 5 minutes, near its "
            "slowdown temperature.",
            first_promql=f"max by (Hostname, gpu) ({metric})",
            mitigations=(
                "All GPUs of a node hot: rack airflow or cooling (the seeds' rack is 30 kW "
                "air-cooled); check inlet temperature.",
                "One GPU hot: fan or heatsink fault; plan a maintenance window.",
            ),
            escalate="Facilities for cooling; hardware vendor for a single failing GPU.",
        ),
        cases=(
            Case("hot", "1m", (Series(labels, "90x20", metric),), "10m", labels),
            Case("normal", "1m", (Series(labels, "70x20", metric),), "10m", None),
        ),
    )


def power_alert(gpu: str) -> Alert:
    spec = get_gpu(gpu)
    model_name = nvml_name(gpu)
    limit_w = spec.power_w * POWER_LIMIT_SHARE
    labels = gpu_labels(model_name)
    metric = "DCGM_FI_DEV_POWER_USAGE"
    return Alert(
        name="InhouseGPUPowerAtLimit",
        group=GROUP,
        expr=f'{metric}{{modelName="{model_name}"}} > {limit_w:g}',
        hold="15m",
        severity="ticket",
        summary=f"{WHERE} at its {spec.power_w:g} W power limit for 15 minutes",
        description="The GPU caps its clocks to stay within its power limit: throughput per "
        "GPU is below plan.",
        runbook=RunbookEntry(
            meaning=f"A {spec.display_name} has drawn over {POWER_LIMIT_SHARE:.0%} of its "
            f"{spec.power_w:g} W limit for 15 minutes, so it is power-throttled.",
            first_promql="rate(DCGM_FI_DEV_POWER_VIOLATION[5m]) / 1e6",
            mitigations=(
                "Check the power cap (`nvidia-smi -q -d POWER`): someone lowered it?",
                "Rack power budget exceeded: check PDUs before adding load.",
            ),
            escalate="Facilities if the rack budget is the limit.",
        ),
        cases=(
            Case(
                "at the limit",
                "1m",
                (Series(labels, f"{spec.power_w:g}x30", metric),),
                "20m",
                labels,
            ),
            Case(
                "below", "1m", (Series(labels, f"{spec.power_w * 0.7:g}x30", metric),), "20m", None
            ),
        ),
    )


def hbm_expected_share(backend: str = "vllm") -> float:
    """Share of the memory interface's time a memory-bound engine keeps it busy while kernels
    run: the perf model's fitted `eta_bw` (achieved / peak HBM bandwidth in decode)."""
    return get_engine_constants(backend).eta_bw


def hbm_bandwidth_alert(model_name: str, backend: str = "vllm") -> Alert:
    """Achieved HBM bandwidth (DRAM activity x peak) below 80% of what the engine's decode
    reaches (eta_bw x peak, for the time kernels run), while the GPU is busy."""
    labels = gpu_labels(model_name)
    floor = HBM_EXPECTED_SHARE * hbm_expected_share(backend)
    sel = f'{{modelName="{model_name}"}}'

    def series(dram: str, engine: str, util: str) -> tuple[Series, ...]:
        return (
            Series(labels, dram, "DCGM_FI_PROF_DRAM_ACTIVE"),
            Series(labels, engine, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
            Series(labels, util, "DCGM_FI_DEV_GPU_UTIL"),
        )

    return Alert(
        name="InhouseGPUHBMBandwidthLow",
        group=GROUP,
        expr=f"DCGM_FI_PROF_DRAM_ACTIVE{sel}\n< {floor:.4g} * DCGM_FI_PROF_GR_ENGINE_ACTIVE{sel}"
        f"\nand DCGM_FI_DEV_GPU_UTIL{sel} > {HBM_LOAD_UTIL_PCT}",
        hold="15m",
        severity="ticket",
        summary=f"{WHERE}: HBM bandwidth below 80% of expected under load",
        description="The memory interface moves fewer bytes than decode needs while kernels "
        "run: a throttled memory or SM clock (heat, power cap) or a failing HBM stack.",
        runbook=RunbookEntry(
            meaning=f"For 15 minutes this GPU, busy (utilization > {HBM_LOAD_UTIL_PCT}%), kept "
            f"its memory interface active less than {floor:.0%} of the time kernels ran; a "
            f"memory-bound decode reaches {hbm_expected_share(backend):.0%} (the perf model's "
            "fitted eta_bw), so tokens per second per GPU are below plan.",
            first_promql="DCGM_FI_PROF_DRAM_ACTIVE / DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            mitigations=(
                "Compare DCGM_FI_DEV_MEM_CLOCK and DCGM_FI_DEV_SM_CLOCK with the other GPUs: "
                "a lower clock on this one is throttling (`nvidia-smi -q -d PERFORMANCE` says "
                "why: thermal, power cap, HW slowdown).",
                "Only this GPU, temperature high: airflow or a fan (see the temperature alert).",
                "Every GPU of a pool at once after a workload change: a prefill-heavy mix "
                "(long prompts) is compute-bound and lowers the ratio honestly; check the "
                "prompt-length panel before suspecting hardware.",
            ),
            escalate="One GPU, throttling not explained by heat or power: hardware vendor.",
        ),
        cases=(
            Case("throttled memory", "1m", series("0.3x25", "0.95x25", "100x25"), "20m", labels),
            Case("healthy decode", "1m", series("0.85x25", "0.95x25", "100x25"), "20m", None),
            Case("idle", "1m", series("0.02x25", "0.05x25", "5x25"), "20m", None),
        ),
    )


def gpu_rules(engines: EngineLayout) -> list[Alert]:
    gpus: list[str] = []
    for pool in engines.pools:
        if get_gpu(pool.gpu).name not in gpus:
            gpus.append(get_gpu(pool.gpu).name)
    if not gpus:
        return []
    model_name = nvml_name(gpus[0])
    return [
        ecc_alert(model_name),
        xid_alert(model_name),
        temperature_alert(model_name),
        *(power_alert(gpu) for gpu in gpus),
        *(hbm_bandwidth_alert(nvml_name(gpu)) for gpu in gpus),
    ]

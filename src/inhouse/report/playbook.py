"""The deployment playbook: bare metal to serving, with the exact commands for this stack and the
state to expect after each step. Steps follow the rendered files (`inhouse render`), so the apply
order names only what was rendered for this stack."""

from __future__ import annotations

import shlex

from inhouse.render.layout import startup_window_s
from inhouse.report.bench_args import bench_args
from inhouse.report.context import Context
from inhouse.spec.stack import StackSpec

PLAN_DIR = "PLAN_DIR"
CACHE = "/mnt/nvme/models/registry"  # the node's NVMe weight cache (docs/weights.md)
APPLY_ORDER = (
    (
        "k8s/dcgm-exporter-counters.yaml",
        "the collectors ConfigMap is in the GPU operator's namespace",
    ),
    ("k8s/engine-networkpolicy.yaml", "only the gateway and Prometheus may reach engines"),
    (
        "k8s/monitoring.yaml",
        "`kubectl -n NS get servicemonitors,prometheusrules` lists the engines', the gateway's "
        "and the stack's rules",
    ),
    ("k8s/gateway.yaml", "the gateway pod is Ready; `/health` answers 200 once an engine is"),
    ("k8s/exporters.yaml", "dcgm-exporter and node_exporter run on every GPU node"),
    ("k8s/logging.yaml", "Loki Ready and the log shipper on every node"),
    ("k8s/tracing.yaml", "Tempo Ready, listening for OTLP on 4317"),
    ("k8s/grafana.yaml", "Grafana Ready with the stack's dashboards provisioned"),
)
DRIVER_CHECKS = (
    "nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv",
    "nvidia-smi -q | grep -E 'CUDA Version|ECC Mode' | sort | uniq -c",
    "nvidia-ctk --version && containerd --version",
    "kubectl get nodes -o wide && kubectl get pods -n gpu-operator",
)


def _sh(*lines: str) -> list[str]:
    return ["```bash", *lines, "```", ""]


def _host_steps(ctx: Context) -> list[str]:
    gpus = sum(int(p["num_gpus"]) for p in ctx.inputs.plan.get("pools") or [])
    lines = ["## 1. Driver, CUDA and container runtime", "", *_sh(*DRIVER_CHECKS)]
    lines += [
        f"Expect: {gpus} GPUs of the planned type, one driver version on all of them, ECC mode "
        "Enabled, the NVIDIA container toolkit and containerd present, every node Ready, the "
        "GPU operator's device plugin, feature discovery and dcgm-exporter pods Running.",
        "",
        "## 2. NVLink topology",
        "",
        *_sh(
            "nvidia-smi topo -m > topo.txt",
            f"inhouse check topology topo.txt --stack {PLAN_DIR}/stack.yaml",
        ),
        "Expect exit 0: every tensor-parallel group NVLink-joined. A `PIX` or `SYS` pair inside "
        "a group: the board is not what was ordered; escalate to the vendor.",
        "",
        "## 3. Weights: pull and verify",
        "",
    ]
    for p in ctx.inputs.stack.get("pools") or []:
        w = p.get("weights") or {}
        name, rev = w.get("name") or p.get("model"), w.get("revision") or "REV"
        registry = w.get("registry") or "s3://REGISTRY/models"
        lines += _sh(
            f"inhouse weights pull {name}@{rev} --registry {registry} \\",
            f"    --cache {CACHE} --public-key model-signing.pub",
            f"inhouse weights verify {CACHE}/by-name/{name}/{rev} --public-key model-signing.pub",
        )
    lines += [
        "Expect: verify exits 0. A failure names the first altered, missing or extra file: do "
        "not serve; `inhouse weights pull NAME@REV --verify-cached` quarantines the copy and "
        "fetches a fresh one; escalate if the registry's copy is refused too (docs/weights.md).",
        "",
    ]
    return lines


def _apply_steps(ctx: Context, stack: StackSpec | None, ns: str) -> list[str]:
    files = set(ctx.inputs.render.files) if ctx.inputs.render else set()
    lines = ["## 4. Render and apply the manifests", ""]
    lines += _sh(f"inhouse render {PLAN_DIR}/stack.yaml --out deploy/")
    lines += _sh(
        "kubectl apply -f deploy/k8s/namespace.yaml",
        f"kubectl -n {ns} create configmap model-signing-public-key \\",
        "    --from-file=key.pub=model-signing.pub",
        f"kubectl -n {ns} create secret generic gateway-tenant-keys --from-file=tenants.yaml",
    )
    lines += [f"Expect: `kubectl get ns {ns}` shows it Active; the ConfigMap and Secret exist.", ""]
    engines = sorted(
        f for f in files if f.startswith("k8s/engine-") and f != "k8s/engine-networkpolicy.yaml"
    )
    for f in engines:
        pool = f.removeprefix("k8s/engine-").removesuffix(".yaml")
        lines += _sh(
            f"kubectl apply -f deploy/{f}",
            f"kubectl -n {ns} get pods -l app.kubernetes.io/component=engine -w",
        )
        lines += [
            f"Expect: the {pool} pods pass their init containers (topology check, signature "
            "verify), then stay Running but not Ready while the model loads, and turn Ready "
            f"within the startupProbe window ({_window(stack, pool)}). A pod restarting before "
            "that: read its verify and engine logs (`kubectl logs POD -c verify-…`).",
            "",
        ]
    for f, expect in APPLY_ORDER:
        if f in files:
            lines += [*_sh(f"kubectl apply -f deploy/{f}"), f"Expect: {expect}.", ""]
    known = {f for f, _ in APPLY_ORDER} | set(engines)
    known |= {"k8s/namespace.yaml", "k8s/autoscaling.yaml"}
    for f in sorted(f for f in files if f.startswith("k8s/") and f not in known):
        lines += _sh(f"kubectl apply -f deploy/{f}")
        lines += [f"Expect: `kubectl -n {ns} get all` shows what it declares Ready.", ""]
    if "k8s/autoscaling.yaml" in files:
        lines += _sh("kubectl apply -f deploy/k8s/autoscaling.yaml")
        lines += [f"Expect: `kubectl -n {ns} get scaledobjects` shows each READY True.", ""]
    return lines


def _serve_steps(ctx: Context) -> list[str]:
    workloads = list(ctx.inputs.plan.get("workloads") or {"chat": None})
    body = f'{{"model": "{workloads[0]}", "prompt": "ping", "max_tokens": 8}}'
    lines = ["## 5. Smoke test", ""]
    lines += _sh(
        'curl -s -H "Authorization: Bearer $KEY" http://GATEWAY/v1/models',
        'curl -s -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" \\',
        f"    http://GATEWAY/v1/completions -d '{body}'",
    )
    lines += [
        "Expect: the plan's model names listed, a completion with `usage`. A 401: the key is "
        "not in the tenant-keys Secret.",
        "",
        "## 6. Bench the plan's workloads",
        "",
    ]
    plan = ctx.inputs.plan.data
    runs = [
        (w, bench_args(plan, w))
        for w in workloads
        if w in plan.get("reproduce", {}).get("simulate", {})
    ]
    if "chat" in dict(runs):
        runs.insert(1, ("chat-cold", bench_args(plan, "chat", cold=True)))
    lines += _sh(
        *(
            f'inhouse bench --target http://GATEWAY --api-key "$KEY" {shlex.join(args)} '
            f"--metrics-url ENGINE_METRICS_URLS --out bench/{name}"
            for name, args in runs
        )
    )
    lines += [
        "Each run drives the workload the plan sized (its own generator, from plan.json); run "
        "the `-cold` probe at the same time as the chat run. `--metrics-url` names each "
        "engine's /metrics (the gateway's has no vLLM series). Nothing else may use the stack "
        "while the runs go: the engines' prefix-cache counters count every request they serve "
        "(the probe shares the chat run's, so section 4 takes the chat run's hit rate from its "
        "clients' `cached_tokens`). Expect: every SLO of the bench "
        "report met at planned peak; section 4 of the reference architecture quotes these "
        "runs (`inhouse report --bench bench/`).",
        "",
        "## 7. Drills",
        "",
        *_sh(
            f"inhouse drill plan --stack {PLAN_DIR}/stack.yaml --out drills-prod/",
            f"inhouse drill run all --stack {PLAN_DIR}/stack.yaml --out drills/",
        ),
        "Expect: all seven pass; the runbook says what each checks and what to do when one "
        "does not.",
        "",
    ]
    return lines


def build_playbook(ctx: Context, stack: StackSpec | None) -> str:
    name = str(ctx.inputs.stack.get("name") or "STACK")
    ns = "NAMESPACE" if ctx.public else name
    lines = [
        f"# Deployment playbook: {ctx.customer()}",
        "",
        "From bare metal to serving, in order. Stop at the first step whose expected state you "
        "do not see.",
        "",
    ]
    lines += _host_steps(ctx) + _apply_steps(ctx, stack, ns) + _serve_steps(ctx)
    return "\n".join(lines)


def _window(stack: StackSpec | None, pool: str) -> str:
    for p in stack.pools if stack else ():
        if p.name == pool:
            seconds, why = startup_window_s(p)
            return f"{seconds} s: {why}"
    return "see the manifest"

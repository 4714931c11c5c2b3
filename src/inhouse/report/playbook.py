"""The deployment playbook: bare metal to serving, with the exact commands for this stack and the
state to expect after each step. Steps follow the rendered files (`inhouse render`), so the apply
order names only what was rendered for this stack."""

from __future__ import annotations

from inhouse.report.context import Context
from inhouse.render.layout import startup_window_s
from inhouse.spec.stack import StackSpec

APPLY_ORDER = (
    ("k8s/namespace.yaml", "the namespace exists (`kubectl get ns NS`)"),
    ("k8s/dcgm-exporter-counters.yaml", "the collectors ConfigMap is in the GPU operator's namespace"),
    ("k8s/engine-networkpolicy.yaml", "only the gateway and Prometheus may reach engines"),
    ("k8s/monitoring.yaml", "ServiceMonitors and the PrometheusRule are listed by `kubectl get servicemonitors,prometheusrules -n NS`"),
    ("k8s/gateway.yaml", "the gateway pod is Ready; `/health` answers 200 once an engine is ready"),
)


def _sh(*lines: str) -> list[str]:
    return ["```bash", *lines, "```", ""]


def build_playbook(ctx: Context, stack: StackSpec | None) -> str:
    name = ctx.customer() if ctx.public else str(ctx.inputs.stack.get("name") or "STACK")
    ns = name if not ctx.public else "NAMESPACE"
    plan_dir = "PLAN_DIR"
    files = set(ctx.inputs.render.files) if ctx.inputs.render else set()
    lines = [f"# Deployment playbook: {name}", "", "From bare metal to serving, in order. Stop at the first step whose expected state you do not see.", ""]
    lines += ["## 1. Driver, CUDA and container runtime", ""]
    lines += _sh(
        "nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv",
        "nvidia-smi -q | grep -E 'CUDA Version|ECC Mode' | sort | uniq -c",
        "nvidia-ctk --version && containerd --version",
        "kubectl get nodes -o wide && kubectl get pods -n gpu-operator",
    )
    gpus = sum(int(p["num_gpus"]) for p in ctx.inputs.plan.get("pools") or [])
    lines += [
        f"Expect: {gpus} GPUs of the planned type, one driver version on all of them, ECC mode "
        "Enabled, the NVIDIA container toolkit and containerd present, every node Ready, the GPU "
        "operator's device plugin, feature discovery and dcgm-exporter pods Running.",
        "",
        "## 2. NVLink topology",
        "",
    ]
    lines += _sh("nvidia-smi topo -m > topo.txt", f"inhouse check topology topo.txt --stack {plan_dir}/stack.yaml")
    lines += ["Expect exit 0: every tensor-parallel group NVLink-joined. A `PIX`/`SYS` pair inside a group: the board is not what was ordered; escalate to the vendor.", ""]
    lines += ["## 3. Weights: pull and verify", ""]
    for p in ctx.inputs.plan.get("pools") or []:
        lines += _sh(
            f"inhouse weights pull {p['hf_id']} --registry s3://REGISTRY/models --cache /mnt/nvme/models --public-key model-signing.pub",
            f"inhouse weights verify /mnt/nvme/models/{p['hf_id']} --public-key model-signing.pub",
        )
    lines += ["Expect: verify exits 0. A failure names the first altered, missing or extra file: do not serve; pull again from the registry and escalate if it repeats.", ""]
    lines += ["## 4. Render and apply the manifests", ""]
    lines += _sh(f"inhouse render {plan_dir}/stack.yaml --out deploy/")
    lines += _sh(
        f"kubectl apply -f deploy/k8s/namespace.yaml",
        f"kubectl -n {ns} create configmap model-signing-public-key --from-file=key.pub=model-signing.pub",
        f"kubectl -n {ns} create secret generic gateway-tenant-keys --from-file=tenants.yaml",
    )
    order = [(f, e) for f, e in APPLY_ORDER if f in files and f != "k8s/namespace.yaml"]
    engines = sorted(f for f in files if f.startswith("k8s/engine-") and f != "k8s/engine-networkpolicy.yaml")
    for f in engines:
        pool = f.removeprefix("k8s/engine-").removesuffix(".yaml")
        window = _window(stack, pool)
        lines += _sh(f"kubectl apply -f deploy/{f}", f"kubectl -n {ns} get pods -l app.kubernetes.io/component=engine -w")
        lines.append(
            f"Expect: the {pool} pods pass their init containers (topology check, signature "
            f"verify), then stay Running but not Ready while the model loads; Ready within the "
            f"startupProbe window ({window}). A pod restarting before that: read its verify and "
            "engine logs (`kubectl logs POD -c verify-…`)."
        )
        lines.append("")
    for f, expect in order:
        lines += _sh(f"kubectl apply -f deploy/{f}")
        lines += [f"Expect: {expect}.", ""]
    if "k8s/autoscaling.yaml" in files:
        lines += _sh("kubectl apply -f deploy/k8s/autoscaling.yaml")
        lines += ["Expect: each ScaledObject READY True (`kubectl get scaledobjects -n NS`).", ""]
    lines += ["## 5. Smoke test", ""]
    model = next(iter(ctx.inputs.plan.get("workloads") or {"chat": None}))
    lines += _sh(
        "curl -s -H \"Authorization: Bearer $KEY\" http://GATEWAY/v1/models",
        "curl -s -H \"Authorization: Bearer $KEY\" -H 'Content-Type: application/json' "
        f"http://GATEWAY/v1/completions -d '{{\"model\": \"{model}\", \"prompt\": \"ping\", \"max_tokens\": 8}}'",
    )
    lines += ["Expect: the plan's model names listed; a completion with `usage`. A 401 means the key is not in the tenant-keys Secret.", ""]
    lines += ["## 6. Bench the plan's workloads", ""]
    bench = [f"inhouse bench --target http://GATEWAY --api-key \"$KEY\" --plan {plan_dir} --workload {w} --out bench/{w}" for w in ctx.inputs.plan.get("workloads") or {}]
    lines += _sh(*bench)
    lines += ["Expect: every SLO in the bench report met at planned peak (the reference architecture's section 4 quotes these runs).", ""]
    lines += ["## 7. Drills", ""]
    lines += _sh("inhouse drill plan --stack PLAN_DIR/stack.yaml --out drills-prod/", "inhouse drill run all --stack PLAN_DIR/stack.yaml --out drills/")
    lines += ["Expect: all seven pass; the runbook (runbook.md) says what each checks and what to do when one does not.", ""]
    return "\n".join(lines)


def _window(stack: StackSpec | None, pool: str) -> str:
    if stack is None:
        return "see the manifest"
    for p in stack.pools:
        if p.name == pool:
            seconds, why = startup_window_s(p)
            return f"{seconds} s: {why}"
    return "see the manifest"

"""Render a stack into what an operator applies and watches: `vllm/` command lines,
`k8s/` manifests (engines, gateway, exporters, Loki and Alloy, Tempo, Grafana), `prometheus/`
config, rules and their promtool tests, `alertmanager/` routes, `grafana/` dashboards and
`runbook.md`. See docs/render.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inhouse.errors import SpecError
from inhouse.render import RenderOptions, render_stack
from inhouse.spec.load import load_stack

COMMAND = "render"
HELP = "write Kubernetes, vLLM arguments, Prometheus rules+tests, Grafana and a runbook"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = RenderOptions()
    parser.add_argument("stack", type=Path, help="stack file (stack.yaml)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--namespace", help="Kubernetes namespace (default: the stack's name)")
    parser.add_argument("--registry", help="mirror registry that replaces every image's host")
    parser.add_argument("--vllm-image", default=defaults.vllm_image)
    parser.add_argument("--gateway-image", default=defaults.gateway_image)
    parser.add_argument(
        "--signing-image",
        default=defaults.signing_image,
        help="image with the model_signing CLI (OpenSSF model-signing)",
    )
    parser.add_argument(
        "--models-host-path",
        default=defaults.models_host_path,
        help="node directory holding the model weights (NVMe cache)",
    )
    parser.add_argument(
        "--prometheus-url", default=defaults.prometheus_url, help="Prometheus that KEDA queries"
    )
    parser.add_argument(
        "--monitoring-namespace",
        default=defaults.monitoring_namespace,
        help="namespace allowed to scrape engines",
    )
    parser.add_argument("--dcgm-namespace", default=defaults.dcgm_namespace)
    parser.add_argument(
        "--runbook-url",
        default=defaults.runbook_url,
        help="where runbook.md is published; alerts link URL#alert",
    )
    parser.add_argument(
        "--page-webhook",
        default=defaults.page_webhook_url,
        help="Alertmanager receiver for severity=page (the pager bridge)",
    )
    parser.add_argument(
        "--dns-ttl-s",
        type=int,
        default=defaults.dns_ttl_s,
        help="TTL of the cluster DNS's Service records (CoreDNS kubernetes plugin `ttl`; "
        "kubeadm's Corefile: 30): scaled pools' engines sleep it out before draining",
    )
    parser.add_argument(
        "--ticket-webhook",
        default=defaults.ticket_webhook_url,
        help="Alertmanager receiver for severity=ticket (the ticket system)",
    )


def run(args: argparse.Namespace) -> int:
    stack = load_stack(args.stack)
    options = RenderOptions(
        namespace=args.namespace,
        registry=args.registry,
        vllm_image=args.vllm_image,
        gateway_image=args.gateway_image,
        signing_image=args.signing_image,
        models_host_path=args.models_host_path,
        prometheus_url=args.prometheus_url,
        monitoring_namespace=args.monitoring_namespace,
        dcgm_namespace=args.dcgm_namespace,
        runbook_url=args.runbook_url,
        page_webhook_url=args.page_webhook,
        ticket_webhook_url=args.ticket_webhook,
        dns_ttl_s=args.dns_ttl_s,
    )
    rendered = render_stack(stack, options)
    out: Path = args.out
    for relative, text in rendered.files.items():
        path = out / relative
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise SpecError(f"cannot write {path}: {exc.strerror}") from exc
        if relative.endswith(".sh"):
            path.chmod(0o755)
    for note in rendered.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"rendered {len(rendered.files)} files for stack {stack.name!r} into {out}")
    return 0

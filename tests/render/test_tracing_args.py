"""Tracing on in the stack reaches vLLM's arguments: `--otlp-traces-endpoint` at Tempo (gRPC)
and, with `tracing.detailed`, `--collect-detailed-traces all`."""

from __future__ import annotations

from typing import Any

import yaml

from inhouse.render import render_stack
from inhouse.spec.stack import parse_stack


def stack(tracing: dict[str, Any], knobs: dict[str, Any] | None = None) -> Any:
    pool = {"name": "chat", "model": "meta-llama/Llama-3.1-8B-Instruct", "knobs": knobs or {}}
    return parse_stack({"name": "t", "pools": [pool], "observability": {"tracing": tracing}})


def engine_args(tracing: dict[str, Any], knobs: dict[str, Any] | None = None) -> list[str]:
    rendered = render_stack(stack(tracing, knobs))
    docs = list(yaml.safe_load_all(rendered.files["k8s/engine-chat.yaml"]))
    deployment = next(d for d in docs if d and d.get("kind") == "StatefulSet")
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"
    ]
    assert not any("otlp-traces-endpoint" in note for note in rendered.notes)
    args: list[str] = container["args"]
    return args


def test_tracing_on_points_each_engine_at_tempo() -> None:
    args = engine_args({"enabled": True})
    endpoint = args[args.index("--otlp-traces-endpoint") + 1]
    assert endpoint.startswith("http://tempo.") and endpoint.endswith(":4317")
    assert "--collect-detailed-traces" not in args  # costs step time: only when asked


def test_detailed_tracing_collects_all_and_a_pools_own_endpoint_wins() -> None:
    args = engine_args(
        {"enabled": True, "detailed": True}, {"otlp_traces_endpoint": "grpc://x:4317"}
    )
    assert args[args.index("--otlp-traces-endpoint") + 1] == "grpc://x:4317"
    assert args[args.index("--collect-detailed-traces") + 1] == "all"


def test_tracing_off_renders_no_tracing_flags() -> None:
    args = engine_args({"enabled": False})
    assert "--otlp-traces-endpoint" not in args and "--collect-detailed-traces" not in args

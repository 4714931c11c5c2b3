"""Serve the gateway in front of a stack's engines, or manage its API keys.

    inhouse gateway --stack stack.yaml                  # engines at the ports `up` gives them
    inhouse gateway --stack stack.yaml --endpoints endpoints.json --port 8000
    inhouse gateway keys create --tenant acme           # prints a key once, and its hash line

Tenants, tiers, limits and options come from the stack's `gateway` section (docs/gateway.md),
tenants' key hashes also from the directory INHOUSE_SECRETS_DIR names (a mounted Secret).
The demo tenant's key comes from --demo-key or INHOUSE_DEMO_KEY; a stack without tenants and
without a demo key gets a generated demo key, printed once.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from inhouse.errors import SpecError
from inhouse.launch.engine_args import DEFAULT_ENGINE_BASE_PORT

if TYPE_CHECKING:
    from inhouse.spec.endpoints import Endpoints

COMMAND = "gateway"
HELP = "serve the tenant-aware, prefix-cache-aware gateway in front of a stack's engines"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", type=Path, help="stack.yaml")
    parser.add_argument(
        "--endpoints",
        type=Path,
        help='JSON {"pools": {POOL: [URL, ...]}, "discovery": {POOL: {"dns", "port", '
        '"max_replicas"}}}, as `inhouse up` and `inhouse render` write it',
    )
    parser.add_argument(
        "--engine-base-port",
        type=int,
        default=DEFAULT_ENGINE_BASE_PORT,
        help="without --endpoints: engines where `up` puts them",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="serve /metrics here (default: the stack's gateway.metrics_port, 9464; 0: any)",
    )
    parser.add_argument("--metrics-host", help="address of the metrics port (default: --host)")
    parser.add_argument(
        "--demo-key",
        default=os.environ.get("INHOUSE_DEMO_KEY"),
        help="API key of a `demo` tenant (env INHOUSE_DEMO_KEY)",
    )
    parser.add_argument("--redis-url", help="share limits through Redis (overrides the stack)")
    parser.add_argument("--log-prompts", action="store_true", help="log prompts (off: redacted)")
    parser.add_argument("--ssl-certfile", help="serve HTTPS with this certificate")
    parser.add_argument("--ssl-keyfile", help="and this private key")
    parser.add_argument(
        "--no-tls",
        action="store_true",
        help="serve plain HTTP even if the stack names TLS files (TLS ends at Envoy in front)",
    )
    sub = parser.add_subparsers(dest="gateway_command", metavar="{keys}")
    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_command")
    create = keys.add_parser("create", help="create a key; prints it once with its hash line")
    create.add_argument("--tenant", required=True)
    create.add_argument(
        "--stack", type=Path, dest="keys_stack", help="check the tenant exists in this stack"
    )


def run(args: argparse.Namespace) -> int:
    if args.gateway_command == "keys":
        return _create_key(args)
    if args.stack is None:
        raise SpecError("--stack STACK.yaml is required (or `inhouse gateway keys create`)")
    return _serve(args)


def _create_key(args: argparse.Namespace) -> int:
    from inhouse.gateway.keys import create_key
    from inhouse.spec.gateway import parse_gateway
    from inhouse.spec.load import load_stack

    if getattr(args, "keys_command", None) != "create":
        raise SpecError("use `inhouse gateway keys create --tenant NAME`")
    if args.keys_stack is not None:
        stack = load_stack(args.keys_stack)
        names = [t.name for t in parse_gateway(stack.gateway, str(args.keys_stack)).tenants]
        if args.tenant not in names:
            raise SpecError(
                f"tenant {args.tenant!r} is not in {args.keys_stack}; tenants: "
                f"{', '.join(names) or 'none'} (add it under gateway.tenants first)"
            )
    key, entry = create_key()
    print(f"API key for tenant {args.tenant} (shown once; store it now): {key}")
    print("Add this line to the tenant's `keys` in the stack file:")
    print(f'  - "{entry}"')
    print("or this line to the gateway's keys_file:")
    print(f"{args.tenant} {entry}")
    return 0


def _endpoints(args: argparse.Namespace, stack: object) -> Endpoints:
    """The engines: the --endpoints file (`up` and `render` write it), else where `up` puts
    them."""
    from inhouse.launch.plan import plan_stack
    from inhouse.spec.endpoints import Endpoints, parse_endpoints_text
    from inhouse.spec.load import read_spec_text

    if args.endpoints is not None:
        text = read_spec_text(args.endpoints, "endpoints file")
        return parse_endpoints_text(text, f"--endpoints {args.endpoints}")
    return Endpoints(pools=plan_stack(stack, args.engine_base_port).pool_urls)  # type: ignore[arg-type]


def _serve(args: argparse.Namespace) -> int:
    from inhouse.gateway.logs import setup_logging
    from inhouse.gateway.secrets_dir import ENV as SECRETS_ENV
    from inhouse.gateway.secrets_dir import load_secrets_dir
    from inhouse.gateway.serve import run_event_loop, serve_gateway
    from inhouse.gateway.service import Gateway
    from inhouse.gateway.tracing import setup_tracing
    from inhouse.spec.gateway import parse_gateway
    from inhouse.spec.load import load_stack

    stack = load_stack(args.stack)
    spec = parse_gateway(stack.gateway, str(args.stack))
    spec = load_secrets_dir(spec, os.environ.get(SECRETS_ENV))
    if args.redis_url:
        spec = spec.model_copy(update={"redis_url": args.redis_url})
    demo_key = args.demo_key
    if not demo_key and not spec.tenants and not spec.keys_file:
        from inhouse.gateway.keys import create_key

        demo_key = create_key()[0]
        print(f"inhouse gateway: demo API key (shown once): {demo_key}", flush=True)
    tls = None if args.no_tls else spec.tls
    certfile = None if args.no_tls else args.ssl_certfile or (tls.certfile if tls else None)
    keyfile = None if args.no_tls else args.ssl_keyfile or (tls.keyfile if tls else None)
    if bool(certfile) != bool(keyfile):
        raise SpecError("TLS needs both --ssl-certfile and --ssl-keyfile")
    endpoints = _endpoints(args, stack)  # every input checked before logging is set up
    setup_logging(spec.log.level, spec.log.requests)

    async def main() -> int:
        limits = None
        if spec.redis_url:
            from inhouse.gateway.limit_failover import FailoverLimits
            from inhouse.gateway.redis_limits import RedisLimits

            # Not reachable at start: the stated failure mode applies until it answers
            # (`FailoverLimits.start` logs it); a gateway does not refuse to start for it.
            shared = RedisLimits(
                spec.redis_url,
                spec.limits.lease_s,
                spec.limits.store_timeout_s,
                spec.proxy.request_timeout_s + 60,
            )
            limits = FailoverLimits(shared, spec.limits, spec.proxy.request_timeout_s)
        gateway = Gateway(
            stack,
            spec,
            endpoints.pools,
            demo_key,
            limits,
            args.log_prompts or None,
            args.stack.resolve().parent,
            endpoints.discovery,
        )
        gateway.observer.tracer = setup_tracing(spec.otlp_endpoint)
        return await serve_gateway(
            gateway,
            args.host,
            args.port,
            certfile,
            keyfile,
            args.metrics_host,
            args.metrics_port,
        )

    return run_event_loop(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inhouse gateway", description=__doc__)
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except SpecError as exc:
        print(f"inhouse gateway: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""The gateway's request path before the engine write, in-process: key check and body parse,
admission (model, count, pool, length gate, limits, prefix blocks) and placement (the routing
policy over live replica views), per request.

    python benchmarks/bench_gateway_admission.py
    python benchmarks/bench_gateway_admission.py --replicas 4 --policy cache_aware --limits

No sockets and no engine: `Gateway.admit` and `Gateway.place` on a stack like the overhead
benchmark's (a pool of mock-model replicas marked healthy), with the overhead benchmark's
streamed completions (150-character shared prefixes, a unique tail each), so the figures are the
Python on a request's critical path and nothing else. Under load the same steps take 2-3x as
long (cold caches between requests); compare builds within one run of this script each, or with
`bench_gateway_overhead.py --compare-src` for the whole path.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sys
import time

import yaml
from bench_gateway_overhead import stack_yaml
from gateway_harness import pct

from inhouse.gateway.keys import create_key
from inhouse.gateway.prompt import parse_request
from inhouse.gateway.service import Gateway
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.stack import parse_stack


async def measure(args: argparse.Namespace) -> dict[str, object]:
    data = yaml.safe_load(stack_yaml(args.replicas, args.policy))
    key, entry = create_key()
    limits = {"rpm": 10**9, "tpm": 10**12} if args.limits else {}
    data["gateway"]["tenants"] = [{"name": "bench", "keys": [entry], "limits": limits}]
    stack = parse_stack(data)
    urls = {"p": [f"http://127.0.0.1:{9000 + i}" for i in range(args.replicas)]}
    gateway = Gateway(stack, parse_gateway(stack.gateway), urls)
    for pool in gateway.pools.values():
        for replica in pool.replicas:
            replica.is_healthy = True
    rng = random.Random(1)
    prefixes = ["".join(rng.choice("abcdefgh") for _ in range(150)) for _ in range(32)]
    bodies = []
    for i in range(args.requests):
        body = {"model": "mock", "prompt": f"{rng.choice(prefixes)} q {i}", "max_tokens": 16}
        bodies.append(json.dumps({**body, "stream": True}).encode())
    authorization = f"Bearer {key}"
    steps: dict[str, list[float]] = {"key_and_parse": [], "admit": [], "place": [], "total": []}

    async def one(i: int, raw: bytes, record: bool) -> None:
        clock = time.perf_counter
        t0 = clock()
        tenant = gateway.tenants.authenticate(authorization)
        parsed = parse_request(raw, "application/json", False)
        t1 = clock()
        admission = await gateway.admission.admit(
            tenant, parsed, "/v1/completions", "bench", f"r{i}", t0
        )
        t2 = clock()
        placement = await gateway.backends.place(
            admission.pool, admission.view, admission.tier, admission.pool_reason, frozenset()
        )
        t3 = clock()
        gateway.dispatcher.first_token(placement)
        gateway.dispatcher.release(placement)
        await gateway.admission.settle(admission, 30)
        if record:
            for name, value in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                steps[name].append(1e6 * value)

    for i, raw in enumerate(bodies[: args.requests // 4]):  # warm-up
        await one(i, raw, False)
    gc.collect()
    gc.freeze()  # as the gateway does after start-up
    for i, raw in enumerate(bodies):
        await one(i, raw, True)
    out: dict[str, object] = {
        "replicas": args.replicas,
        "policy": args.policy,
        "tenant_limits": bool(args.limits),
        "requests": args.requests,
    }
    for name, values in steps.items():
        out[f"{name}_p50_us"] = round(pct(values, 50), 1)
        out[f"{name}_p99_us"] = round(pct(values, 99), 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--policy", default="cache_aware")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--limits", action="store_true",
                        help="give the tenant (never binding) rpm and tpm limits, so every "
                        "request reserves and settles in the in-process store")  # fmt: skip
    args = parser.parse_args()
    result = asyncio.run(measure(args))
    for name, value in result.items():
        print(f"  {name}: {value}")
    print("reproduce: python benchmarks/bench_gateway_admission.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

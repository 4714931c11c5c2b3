"""The gateway's pool choice, per request: its quick path against `routing.pools.choose_pool`.

    python benchmarks/bench_pool_choice.py [--replicas 4] [--calls 20000]

`Dispatcher.choose_pool` answers the common case (the model's pool, no length rule to apply,
up and not saturated) from the replicas' own counts; anything else goes to
`routing.pools.choose_pool` over live `ReplicaView`s, the code the fleet simulator runs. This
prints both per call on a two-pool stack (the first pool with `--replicas` healthy replicas,
LoRA adapters and an alias, the second a small pool), best of seven rounds, for a request
naming each pool, and the ratio: the reason the quick path exists (the two are checked equal on
random states by tests/gateway/test_routing.py).
"""

from __future__ import annotations

import argparse
import timeit

from inhouse.gateway.service import Gateway
from inhouse.routing.pools import choose_pool
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.stack import parse_stack

COMMAND = "python benchmarks/bench_pool_choice.py"


def gateway(replicas: int) -> Gateway:
    chat = {"name": "chat", "model": "meta-llama/Llama-3.3-70B-Instruct", "replicas": replicas,
            "served_model_name": "chat-70b", "aliases": ["chat"],
            "lora_adapters": ["summarize", "classify", "extract"]}  # fmt: skip
    small = {"name": "small", "model": "meta-llama/Llama-3.1-8B-Instruct", "replicas": 2,
             "served_model_name": "small"}  # fmt: skip
    stack = parse_stack({"version": 1, "name": "pools", "pools": [chat, small]})
    urls = {p.name: [f"http://127.0.0.1:{9000 + i}" for i in range(p.replicas)]
            for p in stack.pools}  # fmt: skip
    built = Gateway(stack, parse_gateway(stack.gateway), urls, "k")
    for pool in built.pools.values():
        for replica in pool.replicas:
            replica.is_healthy = True
    return built


def per_call_us(call: object, calls: int) -> float:
    return min(timeit.repeat(call, number=calls, repeat=7)) / calls * 1e6  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    built = gateway(args.replicas)
    dispatcher, stack = built.dispatcher, built.stack
    print(f"== pool choice per request, {args.replicas} + 2 replicas, best of 7 rounds")
    for model in ("chat-70b", "small"):
        quick = dispatcher.choose_pool(model, 500)
        full = choose_pool(stack, model, 500, dispatcher.views)  # type: ignore[arg-type]
        assert quick == full, (quick, full)
        quick_us = per_call_us(lambda m=model: dispatcher.choose_pool(m, 500), args.calls)
        full_us = per_call_us(
            lambda m=model: choose_pool(stack, m, 500, dispatcher.views),  # type: ignore[arg-type]
            args.calls,
        )
        print(f"   model {model:9} quick path {quick_us:5.2f} µs   routing.pools.choose_pool "
              f"over views {full_us:5.2f} µs   (×{full_us / quick_us:.1f})")  # fmt: skip
    print(f"   reproduce: {COMMAND} --replicas {args.replicas} --calls {args.calls}")


if __name__ == "__main__":
    main()

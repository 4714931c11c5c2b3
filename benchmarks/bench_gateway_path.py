"""The gateway's whole request path in-process, without sockets: a streamed completion's bytes
into the gateway's HTTP protocol, the engine's response into its upstream connection, the
client's bytes out, and everything between (key check, parse, admission, routing, the relay,
settling, metrics). Per request, the Python the gateway runs; no kernel, no other process.

    python benchmarks/bench_gateway_path.py
    python benchmarks/bench_gateway_path.py --tokens 1 --requests 20000
    python benchmarks/bench_gateway_path.py --compare-src /tmp/base   # A/B, alternating rounds

The engine is a fake transport under the gateway's real upstream connection: each request it
is written answers with the response head, then `--tokens` SSE events, the usage chunk,
`[DONE]` and the end, one event per loop turn (as separate reads would come). The client is
a fake transport under the gateway's real server protocol (`http1.server.GatewayProtocol`, as
`inhouse gateway` serves with it). Requests go one at a time, so a request's time is the CPU
it costs with hot caches; under load the same work takes longer (cold caches), so compare
builds in one run of this script: `--compare-src` runs another checkout's gateway in a child
process, rounds alternating, and prints both.

Where this sits beside the socket benchmark: `bench_gateway_overhead.py` reports CPU seconds
per 1,000 requests of the real process, kernel included; this one is the gateway's own share,
repeatable to a few percent.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_harness import pct

ROUND_REQUESTS = 500


class FakeClientTransport:
    """What the gateway writes to its client; notes when a response's chunked body ended."""

    def __init__(self) -> None:
        self.num_writes = 0
        self.num_bytes = 0
        self.num_done = 0
        self.closing = False
        self.last = b""
        self.done: asyncio.Future[None] | None = None

    def write(self, data: bytes) -> None:
        self.num_writes += 1
        self.num_bytes += len(data)
        self.last = data
        if data.endswith(b"0\r\n\r\n"):
            self.num_done += 1
            if self.done is not None and not self.done.done():
                self.done.set_result(None)

    def writelines(self, parts: list[bytes]) -> None:
        self.write(b"".join(parts))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        extra = {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 40000)}
        return extra.get(name, default)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def set_protocol(self, protocol: object) -> None: ...

    def get_write_buffer_size(self) -> int:
        return 0


def engine_events(num_tokens: int) -> list[bytes]:
    """What the mock engine of the overhead benchmark streams, chunk-framed, one per read."""
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
    )
    events = []
    for i in range(num_tokens):
        finish = b'"length"' if i == num_tokens - 1 else b"null"
        events.append(
            b'{"id":"cmpl-mock","object":"text_completion","model":"mock","choices":[{"index":0,'
            b'"text":" the","logprobs":null,"finish_reason":' + finish + b"}]}"
        )
    usage = f'{{"prompt_tokens":50,"completion_tokens":{num_tokens},"total_tokens":60}}'
    events.append(b'{"id":"cmpl-mock","object":"text_completion","choices":[],"usage":'
                  + usage.encode() + b"}")  # fmt: skip
    events.append(b"[DONE]")
    framed = []
    for payload in events:
        data = b"data: " + payload + b"\n\n"
        framed.append(b"%x\r\n%b\r\n" % (len(data), data))
    framed[0] = head + framed[0]
    framed[-1] += b"0\r\n\r\n"
    return framed


class FakeEngineTransport:
    """Under the gateway's upstream connection: answers each request written to it with the
    engine's response, one piece per turn of the loop."""

    def __init__(self, protocol: asyncio.Protocol, pieces: list[bytes]) -> None:
        self.protocol = protocol
        self.pieces = pieces
        self.loop = asyncio.get_running_loop()
        self.closing = False

    def write(self, data: bytes) -> None:
        self.loop.call_soon(self._answer, 0)

    def _answer(self, i: int) -> None:
        if self.closing:
            return
        self.protocol.data_received(self.pieces[i])
        if i + 1 < len(self.pieces):
            self.loop.call_soon(self._answer, i + 1)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


async def run_rounds(num_tokens: int, num_rounds: int, replicas: int, control: Any) -> None:
    """Serve `num_rounds` rounds of `ROUND_REQUESTS` requests; after each round, report its
    per-request times to `control` (a callable), which may wait for the other build."""
    from bench_gateway_overhead import KEY, stack_yaml

    from inhouse.gateway.service import Gateway
    from inhouse.spec.gateway import parse_gateway
    from inhouse.spec.stack import parse_stack

    try:
        from inhouse.http1 import upstream
    except ImportError:  # a checkout from before inhouse.http1 (`--compare-src`)
        from inhouse.gateway import upstream  # type: ignore[no-redef]
    pieces = engine_events(num_tokens)

    async def connect(self: Any) -> Any:
        conn = upstream._Connection(self)
        conn.connection_made(FakeEngineTransport(conn, pieces))  # type: ignore[arg-type]
        return conn

    upstream.UpstreamPool._connect = connect  # type: ignore[method-assign]
    stack = parse_stack(json.loads(stack_yaml(replicas)))
    urls = {"p": [f"http://127.0.0.1:{9000 + i}" for i in range(replicas)]}
    gateway = Gateway(stack, parse_gateway(stack.gateway), urls, KEY)
    for pool in gateway.pools.values():
        for replica in pool.replicas:
            replica.is_healthy = True
    protocol = server_protocol(gateway)
    client = FakeClientTransport()
    protocol.connection_made(client)  # type: ignore[arg-type]
    rng = random.Random(7)
    prefixes = ["".join(rng.choice("abcdefgh") for _ in range(150)) for _ in range(32)]

    def request(i: int) -> bytes:
        body = json.dumps({"model": "mock", "prompt": rng.choice(prefixes) + f" q{i}",
                           "max_tokens": 16, "stream": True}).encode()  # fmt: skip
        return (
            b"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1:8000\r\n"
            b"content-type: application/json\r\naccept: */*\r\nx-request-id: bench\r\n"
            b"authorization: Bearer " + KEY.encode() + b"\r\ncontent-length: %d\r\n\r\n%b"
        ) % (len(body), body)

    loop = asyncio.get_running_loop()

    async def one(raw: bytes) -> float:
        client.done = loop.create_future()
        t0 = time.perf_counter()
        protocol.data_received(raw)
        await client.done
        elapsed = time.perf_counter() - t0
        assert b"data: [DONE]" in client.last, client.last[-200:]
        return elapsed

    for i in range(ROUND_REQUESTS):  # warm-up: connections open, caches filled
        await one(request(i))
    gc.collect()
    gc.freeze()  # as `serve_gateway` does after start-up
    n = ROUND_REQUESTS
    for _ in range(num_rounds):
        raws = [request(n + i) for i in range(ROUND_REQUESTS)]
        n += ROUND_REQUESTS
        times = [await one(raw) for raw in raws]
        await control(times)
    await gateway.stop()


def server_protocol(gateway: Any) -> Any:
    """A client connection's protocol as `inhouse gateway` serves it; for a checkout from before
    the gateway's own server (`--compare-src`), uvicorn's protocol as that checkout used it."""
    try:
        from inhouse.gateway.serve import gateway_server

        try:
            from inhouse.http1.server import GatewayProtocol
        except ImportError:  # a checkout from before inhouse.http1
            from inhouse.gateway.http_server import GatewayProtocol  # type: ignore[no-redef]
    except ImportError:
        from uvicorn.server import ServerState

        from inhouse.gateway.serve import uvicorn_config  # type: ignore[attr-defined]

        config = uvicorn_config(gateway, "127.0.0.1", 8000)
        config.load()
        return config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=ServerState(), app_state={},
            _loop=asyncio.get_running_loop(),
        )  # fmt: skip
    server = gateway_server(gateway)
    server.loop = asyncio.get_running_loop()
    return GatewayProtocol(server)


def child_main(args: argparse.Namespace) -> int:
    """A build's side of an A/B: a round at each line read on stdin, its times on stdout."""

    async def control(times: list[float]) -> None:
        print(json.dumps(times), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    sys.stdin.readline()
    run_loop(run_rounds(args.tokens, args.rounds, args.replicas, control))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=16, help="SSE token events per response")
    parser.add_argument("--requests", type=int, default=10_000, help="measured requests a build")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--compare-src", type=Path, metavar="CHECKOUT",
                        help="also run another checkout's gateway, rounds alternating")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.rounds = args.rounds or max(1, args.requests // ROUND_REQUESTS)
    if args.child:
        return child_main(args)
    builds = {"this": None}
    if args.compare_src is not None:
        builds["compare"] = str(args.compare_src.resolve() / "src")
    children = {}
    for name, src in builds.items():
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = src
        argv = [sys.executable, __file__, "--child", "--tokens", str(args.tokens),
                "--rounds", str(args.rounds), "--replicas", str(args.replicas)]  # fmt: skip
        children[name] = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
        )
    times: dict[str, list[float]] = {name: [] for name in builds}
    for _ in range(args.rounds):
        for name, child in children.items():  # one round each, in turn: same host phase
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write("\n")
            child.stdin.flush()
            line = child.stdout.readline()
            if not line:
                raise SystemExit(f"the {name} build's child stopped (its stderr is above)")
            times[name] += json.loads(line)
    for child in children.values():
        assert child.stdin is not None
        child.stdin.write("\n")
        child.stdin.close()
        child.wait(30)
    print(f"== one streamed completion ({args.tokens} tokens) through the gateway, in-process")
    for name, values in times.items():
        row = {q: round(1e6 * pct(values, q), 1) for q in (50, 90, 99)}
        mean = 1e6 * sum(values) / len(values)
        print(f"  {name}: requests {len(values)}, mean {mean:.1f} us, p50 {row[50]} us, "
              f"p90 {row[90]} us, p99 {row[99]} us")  # fmt: skip
    if "compare" in times:
        ratio = pct(times["this"], 50) / pct(times["compare"], 50)
        print(f"  this / compare at p50: {ratio:.3f}")
    print("reproduce: python benchmarks/bench_gateway_path.py " + " ".join(sys.argv[1:]))
    return 0


def run_loop(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


if __name__ == "__main__":
    sys.exit(main())

"""The bench client's CPU per streamed response, without sockets: one 16-token SSE completion
(chunked, one read per event, as the mock server writes it) fed read by read into a client
connection over a fake transport, and read into its `Outcome`. What `inhouse bench` spends per
stream in Python, repeatable to a few percent; `bench_client_capacity.py` is the same client
against a real server (and the host's noise).

    python benchmarks/bench_client_parse.py
    python benchmarks/bench_client_parse.py --compare-src /tmp/base   # A/B, alternating rounds

`--compare-src` runs another checkout's client in a child process (its `src` first on the
path), rounds alternating, so both builds meet the same load on a shared host.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROUNDS = 6


def reads(tokens: int) -> list[bytes]:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    choice = {"index": 0, "text": " the", "logprobs": None, "finish_reason": None}
    event = {"id": "cmpl-1", "object": "text_completion", "model": "m", "choices": [choice]}
    data = b"data: " + json.dumps(event).encode() + b"\n\n"
    out = [head] + [b"%x\r\n%b\r\n" % (len(data), data)] * tokens
    usage = b'data: {"id":"cmpl-1","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":'
    last = usage + str(tokens).encode() + b"}}\n\ndata: [DONE]\n\n"
    out.append(b"%x\r\n%b\r\n0\r\n\r\n" % (len(last), last))
    return out


class FakeTransport:
    def write(self, data: bytes) -> None: ...

    def abort(self) -> None: ...

    def is_closing(self) -> bool:
        return False


async def one_round(num: int, tokens: int) -> list[float]:
    from inhouse.bench.metrics import Outcome

    try:
        from inhouse.bench.request_func import OpenAIStream
        from inhouse.http1.client import StreamConnection
    except ImportError:  # a checkout from before inhouse.http1: the hand-rolled parser
        return await old_round(num, tokens)
    pieces = reads(tokens)
    times = []
    for index in range(num):
        outcome = Outcome(index, 0.0)
        outcome.t_send = start = time.perf_counter()
        conn = StreamConnection()
        conn.connection_made(FakeTransport())  # type: ignore[arg-type]
        conn.send(b"", OpenAIStream(outcome, False))
        for piece in pieces:
            conn.feed(piece, time.perf_counter())
        times.append(time.perf_counter() - start)
        assert outcome.success and outcome.num_chunks == tokens, outcome.error
    return times


async def old_round(num: int, tokens: int) -> list[float]:
    from inhouse.bench.http import Connection, _Exchange  # type: ignore[attr-defined]
    from inhouse.bench.metrics import Outcome

    loop = asyncio.get_running_loop()
    pieces = reads(tokens)
    times = []
    for index in range(num):
        outcome = Outcome(index, 0.0)
        outcome.t_send = start = time.perf_counter()
        conn = Connection()
        conn.connection_made(FakeTransport())  # type: ignore[arg-type]
        exchange = _Exchange(outcome, False, start)
        exchange.done = loop.create_future()
        conn.send(b"", exchange)
        for piece in pieces:
            conn.feed(piece, time.perf_counter())
        times.append(time.perf_counter() - start)
        assert outcome.success and outcome.num_chunks == tokens, outcome.error
    return times


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def run_build(src: str | None, num: int, tokens: int) -> list[float]:
    argv = [sys.executable, __file__, "--child", "--requests", str(num), "--tokens", str(tokens)]
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    times: list[float] = json.loads(out)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000, help="streams a build, per round")
    parser.add_argument("--tokens", type=int, default=16, help="SSE token events per stream")
    parser.add_argument("--compare-src", type=Path, metavar="CHECKOUT",
                        help="also run another checkout's client, rounds alternating")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(one_round(args.requests, args.tokens))))
        return 0
    builds: dict[str, str | None] = {"this": None}
    if args.compare_src is not None:
        builds["compare"] = str(args.compare_src.resolve() / "src")
    times: dict[str, list[float]] = {name: [] for name in builds}
    for _ in range(ROUNDS):
        for name, src in builds.items():
            times[name] += run_build(src, args.requests, args.tokens)
    print(f"== one streamed completion ({args.tokens} tokens) read by the bench client")
    for name, values in times.items():
        us: dict[str, Any] = {p: round(1e6 * pct(values, p), 1) for p in (50, 90, 99)}
        print(f"  {name}: streams {len(values)}, p50 {us[50]} us, p90 {us[90]} us, p99 {us[99]} us")
    if "compare" in times:
        ratio = pct(times["this"], 50) / pct(times["compare"], 50)
        print(f"  this / compare at p50: {ratio:.3f}")
    print("reproduce: python benchmarks/bench_client_parse.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The client and driver against the mock server, whose timing is known."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import time

import pytest
from tests.support.mock_server import MockServer, MockServerThread, MockTiming

from inhouse.bench.config import BenchSpec
from inhouse.bench.driver import run_live
from inhouse.bench.http import Client
from inhouse.bench.metrics import summarize
from inhouse.bench.request_func import Job, Target
from inhouse.bench.sender import ProcessSender, use_realtime_priority
from inhouse.errors import InhouseError, SpecError


async def send_one(timing: MockTiming, *, chat: bool = False, max_tokens: int = 5):
    server = MockServer(timing)
    port = await server.start()
    client = Client(Target.parse(f"http://127.0.0.1:{port}"))
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = {"max_tokens": max_tokens, "stream": True}
    body.update(
        {"messages": [{"role": "user", "content": "x" * 40}]} if chat else {"prompt": "x" * 40}
    )
    job = Job(0, time.perf_counter(), path, json.dumps(body).encode(), keep_text=True)
    outcome = await client.send(job)
    client.close()
    await server.stop()
    return outcome


def test_completion_stream_timing_and_usage() -> None:
    timing = MockTiming(ttft_s=0.05, itl_s=0.01, cached_fraction=0.5)
    o = asyncio.run(send_one(timing))
    assert o.success and o.status == 200 and o.error == ""
    assert 0.049 <= o.ttft_s < 0.15
    assert len(o.itl_s) == 4  # 5 chunks: the first is TTFT
    assert sum(o.itl_s) / 4 == pytest.approx(0.01, abs=0.004)
    assert o.latency_s == pytest.approx(o.ttft_s + sum(o.itl_s))
    assert (o.completion_tokens, o.prompt_tokens, o.cached_tokens) == (5, 10, 5)
    assert o.text == " the" * 5


def test_chat_role_chunk_sets_ttft_before_content() -> None:
    timing = MockTiming(ttft_s=0.06, itl_s=0.01, role_chunk_lead_s=0.04)
    o = asyncio.run(send_one(timing, chat=True))
    assert o.success
    assert o.ttft_content_s is not None and o.ttft_content_s - o.ttft_s > 0.03
    assert len(o.itl_s) == 5  # the role chunk is a choices message: it adds one gap


def test_http_error_is_a_failure_with_the_body() -> None:
    o = asyncio.run(send_one(MockTiming(fail_status=503)))
    assert not o.success and o.status == 503
    assert o.error.startswith("HTTP 503") and "injected" in o.error


def test_connection_refused_is_a_failure() -> None:
    async def go():
        client = Client(Target("127.0.0.1", 1))
        return await client.send(Job(0, time.perf_counter(), "/v1/completions", b"{}"))

    o = asyncio.run(go())
    assert not o.success and "Error" in o.error


def spec_for(url: str, **kw) -> BenchSpec:
    values = {
        "workload": "utility",
        "target": url,
        "workload_params": {"document": "60", "output": "4", "instruction_tokens": "32"},
        "rate": 40.0,
        "num_requests": 20,
        "slo": {"ttft_ms": 500.0},
    }
    values.update(kw)
    return BenchSpec(**values)


def test_run_live_against_the_mock_server() -> None:
    with MockServerThread(MockTiming(ttft_s=0.02, itl_s=0.005, cached_fraction=0.25)) as mock:
        run = asyncio.run(run_live(spec_for(mock.url)))
    assert len(run.results) == 20 and all(r.success for r in run.results)
    assert run.meta["model_id"] == "mock"
    out = summarize(run.results, run.duration_s, (50, 99), run.spec.slo)
    assert out["completed"] == 20 and out["total_output_tokens"] == 80
    assert 20.0 <= out["p50_ttft_ms"] < 120.0
    assert out["prefix_cache_hit_rate_client"] == pytest.approx(0.25, abs=0.02)
    assert run.server is not None
    assert run.server["prefix_cache_hit_rate_server"] == pytest.approx(0.25, abs=0.02)
    # 20 requests on vLLM's schedule at 40 req/s: the last one is due at 0.5 s.
    assert run.duration_s >= 0.5
    sched = sorted(r.outcome.t_sched for r in run.results)
    assert sched[-1] - run.results[0].outcome.t_sched == pytest.approx(0.5, abs=0.05)


def test_closed_loop_keeps_concurrency() -> None:
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        spec = spec_for(mock.url, rate=None, concurrency=3, num_requests=12)
        run = asyncio.run(run_live(spec))
    assert len(run.results) == 12
    events = sorted(
        [(r.outcome.t_send, 1) for r in run.results] + [(r.outcome.t_done, -1) for r in run.results]
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak == 3


def test_interrupt_keeps_what_was_measured() -> None:
    async def go():
        def hook(driver) -> None:
            asyncio.get_running_loop().call_later(0.4, driver.interrupt)

        spec = spec_for(mock.url, rate=20.0, num_requests=None, duration_s=30.0)
        return await run_live(spec, on_driver=hook)

    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.02)) as mock:
        run = asyncio.run(go())
    assert run.interrupted
    assert 0.3 < run.duration_s < 1.5
    assert 1 <= len(run.results) < 30 and all(r.success for r in run.results)


def test_two_worker_processes() -> None:
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.002)) as mock:
        run = asyncio.run(run_live(spec_for(mock.url, workers=2, num_requests=30)))
    assert len(run.results) == 30 and all(r.success for r in run.results)
    names = {p["process"] for p in run.health}
    assert names == {"driver", "worker-0", "worker-1"}


def test_agent_sessions_against_the_mock_server() -> None:
    params = {
        "sessions": "2",
        "min_turns": "2",
        "max_turns": "2",
        "system_prompt_tokens": "32",
        "first_message": "20",
        "tool_output": "20",
        "output": "4",
        "think_time_s": "0.05",
        "min_think_s": "0.05",
        "ramp_s": "0.1",
    }
    with MockServerThread(MockTiming(ttft_s=0.005, itl_s=0.002)) as mock:
        spec = BenchSpec(workload="agent", target=mock.url, workload_params=params, duration_s=2.0)
        run = asyncio.run(run_live(spec))
    sessions = {r.session_key for r in run.results}
    assert len(sessions) >= 2 and all(r.success for r in run.results)
    assert run.meta["num_history_misses"] == 0
    assert not math.isnan(run.duration_s)


def test_kernel_timestamps_measure_the_same_stream() -> None:
    async def go():
        server = MockServer(MockTiming(ttft_s=0.03, itl_s=0.01, grid=False))
        port = await server.start()
        client = Client(Target.parse(f"http://127.0.0.1:{port}"), kernel_timestamps=True)
        body = json.dumps({"prompt": "x" * 40, "max_tokens": 5, "stream": True}).encode()
        outcome = await client.send(Job(0, time.perf_counter(), "/v1/completions", body))
        # The connection is reused for a second request.
        again = await client.send(Job(1, time.perf_counter(), "/v1/completions", body))
        client.close()
        await server.stop()
        return outcome, again

    o, again = asyncio.run(go())
    assert o.success and again.success and o.completion_tokens == 5
    assert 0.029 <= o.ttft_s < 0.15
    assert len(o.itl_s) == 4 and sum(o.itl_s) / 4 == pytest.approx(0.01, abs=0.004)


def test_kernel_timestamps_through_the_driver() -> None:
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        run = asyncio.run(run_live(spec_for(mock.url, kernel_timestamps=True, num_requests=10)))
    assert len(run.results) == 10 and all(r.success for r in run.results)
    assert run.meta["client"]["timestamps"] == "kernel"
    assert run.meta["client"]["scheduling"] == "normal"


def test_realtime_priority_is_refused_with_the_fix_when_not_permitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    with pytest.raises(SpecError, match="CAP_SYS_NICE"):
        use_realtime_priority()


@pytest.mark.skipif(
    not hasattr(os, "sched_setscheduler") or os.geteuid() != 0, reason="needs Linux and root"
)
def test_realtime_priority_is_inherited_by_worker_processes() -> None:
    # In a child interpreter, so this test process keeps its normal scheduling.
    code = (
        "import multiprocessing, os\n"
        "from inhouse.bench.sender import use_realtime_priority\n"
        "from inhouse.bench.sender import scheduling_policy\n"
        "use_realtime_priority()\n"
        "ctx = multiprocessing.get_context('spawn')\n"
        "with ctx.Pool(1) as pool:\n"
        "    print(scheduling_policy(), pool.apply(os.sched_getscheduler, (0,)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["realtime", str(os.SCHED_FIFO)]


def test_a_stale_kept_alive_connection_is_retried_once() -> None:
    sse = b'data: {"choices":[{"index":0,"text":"a"}]}\n\ndata: [DONE]\n\n'
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: "
        + str(len(sse)).encode()
        + b"\r\n\r\n"
        + sse
    )
    seen = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        if len(seen) > 1:  # the first connection plays one the server closed while idle
            writer.write(answer)
            await writer.drain()
        writer.close()

    async def go():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = Client(Target("127.0.0.1", port))
        await client.prewarm(1)
        outcome = await client.send(Job(0, time.perf_counter(), "/v1/completions", b"{}"))
        client.close()
        server.close()
        await server.wait_closed()
        return outcome, client.num_retries

    outcome, retries = asyncio.run(go())
    assert outcome.success and outcome.num_chunks == 1 and retries == 1


def test_a_stream_that_ends_in_an_error_event_is_a_failure() -> None:
    o = asyncio.run(send_one(MockTiming(error_after_tokens=2), max_tokens=5))
    assert not o.success
    assert o.error == "error event in stream: upstream lost"
    assert o.ttft_s is not None and o.num_chunks == 2  # what it measured stays


def test_an_interrupt_after_the_last_request_leaves_the_run_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while the run scrapes the server's counters after its last request: the run was
    complete, but it was reported interrupted (exit code 130, 'figures incomplete')."""
    from inhouse.bench import driver as driver_module

    drivers = []
    scrape = driver_module.scrape_all

    async def scrape_then_interrupt(urls):  # type: ignore[no-untyped-def]
        if drivers and drivers[0].num_sent:  # the scrape after the run
            drivers[0].interrupt()
        return await scrape(urls)

    monkeypatch.setattr(driver_module, "scrape_all", scrape_then_interrupt)
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        run = asyncio.run(run_live(spec_for(mock.url, num_requests=5), on_driver=drivers.append))
    assert len(run.results) == 5 and all(r.success for r in run.results)
    assert not run.interrupted


def test_a_worker_process_that_dies_mid_run_fails_its_requests_instead_of_hanging() -> None:
    """A worker killed mid-run (the OOM killer, a signal to the process group): the requests
    it held never came back, and the driver waited for them forever."""

    async def go():  # type: ignore[no-untyped-def]
        def hook(driver) -> None:  # type: ignore[no-untyped-def]
            on_outcome = driver.on_outcome

            def kill_after_five(outcome) -> None:  # type: ignore[no-untyped-def]
                on_outcome(outcome)
                if len(driver.results) + len(driver.outbox) == 5:
                    driver.sender._procs[0].kill()

            driver.on_outcome = kill_after_five

        spec = spec_for(mock.url, workers=2, rate=20.0, num_requests=30)
        return await asyncio.wait_for(run_live(spec, on_driver=hook), 60.0)

    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.05)) as mock:
        run = asyncio.run(go())
    assert len(run.results) == 30  # every request sent has an outcome
    lost = [r for r in run.results if not r.success]
    assert lost and all(r.outcome.error.startswith("lost: worker-0 exited") for r in lost)
    assert sum(r.success for r in run.results) >= 15  # worker-1 carried on, then took it all


class _ExitsWhenUnpickled:
    """Passed as the target: a worker process exits with code 3 as it unpickles its arguments,
    before it is ready (as one killed, out of memory or failing to import, while starting)."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os._exit, (3,))


def test_a_worker_process_that_dies_while_starting_is_named() -> None:
    """A worker that died during start-up ended the run in an EOFError traceback from deep in
    multiprocessing, naming neither the worker nor what to do."""
    import multiprocessing

    async def go() -> None:
        sender = ProcessSender(_ExitsWhenUnpickled(), lambda outcome: None, 2)  # type: ignore[arg-type]
        await sender.start()

    with pytest.raises(InhouseError) as err:
        asyncio.run(asyncio.wait_for(go(), 60.0))
    message = str(err.value)
    assert message.startswith("worker-0 (pid ") and "exited with code 3 while starting" in message
    assert "--workers" in message
    assert not multiprocessing.active_children()  # the other worker was stopped too


def test_a_stop_signal_to_the_whole_group_leaves_the_workers_to_the_driver() -> None:
    """A closed terminal (SIGHUP) or `kill -TERM -PGID` reaches every worker too. A worker that
    died of it before the driver had handled its own signal lost its jobs in flight as failed
    requests ("lost: worker-0 exited"): a race the driver sometimes lost on a busy host. The
    workers leave stop signals to the driver, which stops them through their pipes."""
    import signal

    async def go() -> list[object]:
        server = MockServer(MockTiming(ttft_s=0.5, itl_s=0.01))
        port = await server.start()
        outcomes: list[object] = []
        sender = ProcessSender(Target.parse(f"http://127.0.0.1:{port}"), outcomes.append, 2)
        await sender.start()
        body = json.dumps({"prompt": "x" * 40, "max_tokens": 3, "stream": True}).encode()
        for i in range(8):
            sender.submit(Job(i, time.perf_counter(), "/v1/completions", body))
        sender.flush()
        deadline = time.monotonic() + 30
        while server.stats.num_requests < 8 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            os.kill(sender._procs[0].pid, signum)
        await asyncio.sleep(0.2)  # the pipe's end, had the worker died, is seen by now
        alive = sender._procs[0].is_alive()
        await sender.stop(cancel=False)
        await server.stop()
        assert alive, f"worker-0 died of the group's signal: {sender._procs[0].exitcode}"
        return outcomes

    outcomes = asyncio.run(asyncio.wait_for(go(), 60.0))
    assert len(outcomes) == 8
    assert all(o.success for o in outcomes), [o.error for o in outcomes]  # type: ignore[attr-defined]

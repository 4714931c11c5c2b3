"""Send jobs at their scheduled times, in this process or spread over worker processes.

`LocalSender` arms one timer per job on the event loop (`call_at`), so a job handed over ahead
of time leaves at its time without a sleeping task; it also measures its own event-loop lag and
CPU time. `ProcessSender` runs a `LocalSender` in each of N spawned processes and hands them
jobs round-robin over pipes, ahead of time, so pacing and parsing happen in parallel while the
driver (workload, prompts, metrics) stays in this process. `perf_counter` is the system-wide
monotonic clock on Linux, so times agree across processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from inhouse.bench.http import Client
from inhouse.bench.metrics import Outcome
from inhouse.bench.request_func import JSON_LIBRARY, Job, Target
from inhouse.errors import InhouseError, SpecError

LAG_PROBE_INTERVAL_S = 0.01
FLUSH_INTERVAL_S = 0.005

OnOutcome = Callable[[Outcome], None]


def loop_kind() -> str:
    """The kind of event loop running now."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return "none"
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


class LagMonitor:
    """Event-loop lag: how late a 10 ms sleep wakes up, sampled all run long."""

    def __init__(self) -> None:
        self.samples_s: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = 0.0
        self._wall0 = 0.0

    def start(self) -> None:
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._probe())

    async def _probe(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(LAG_PROBE_INTERVAL_S)
            self.samples_s.append(time.perf_counter() - t - LAG_PROBE_INTERVAL_S)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def report(self, name: str) -> dict[str, Any]:
        wall = max(time.perf_counter() - self._wall0, 1e-9)
        lag = np.asarray(self.samples_s or [0.0]) * 1000.0
        return {
            "process": name,
            "cpu_fraction": (time.process_time() - self._cpu0) / wall,
            "loop_lag_p50_ms": float(np.percentile(lag, 50)),
            "loop_lag_p99_ms": float(np.percentile(lag, 99)),
            "loop_lag_max_ms": float(np.max(lag)),
        }


class LocalSender:
    def __init__(
        self,
        target: Target,
        on_outcome: OnOutcome,
        prewarm: int = 32,
        name: str = "main",
        kernel_timestamps: bool = False,
    ) -> None:
        self.client = Client(target, kernel_timestamps)
        self.on_outcome = on_outcome
        self.prewarm = prewarm
        self.name = name
        self.monitor = LagMonitor()
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.client.prewarm(self.prewarm)
        self.monitor.start()

    def submit(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        delay = job.t_sched - time.perf_counter()
        if delay <= 0:
            self._launch(job)
        else:
            self._timers[job.index] = loop.call_at(loop.time() + delay, self._launch, job)

    def flush(self) -> None:
        return None

    def _launch(self, job: Job) -> None:
        self._timers.pop(job.index, None)
        task = asyncio.get_running_loop().create_task(self._run(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, job: Job) -> None:
        outcome = await self.client.send(job)
        outcome.t_done = time.perf_counter()
        self.on_outcome(outcome)

    async def stop(self, cancel: bool) -> None:
        """Stop sending; with `cancel`, abort what is in flight (its outcomes still arrive)."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if cancel:
            for task in list(self._tasks):
                task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self.monitor.stop()
        self.client.close()

    def health(self) -> list[dict[str, Any]]:
        report = self.monitor.report(self.name)
        report["connections_opened"] = self.client.num_opened
        report["connection_errors"] = self.client.num_open_errors
        report["stale_connection_retries"] = self.client.num_retries
        return [report]


# -- worker processes ------------------------------------------------------------------------


def start_pipe_reader(
    conn: Connection,
    loop: asyncio.AbstractEventLoop,
    on_message: Callable[[tuple[str, Any] | None], None],
) -> threading.Thread:
    """Read `conn` with blocking `recv` in a thread and hand each message to the loop; `None`
    when the other end closes. NOTE: not `loop.add_reader`: uvloop makes the fd non-blocking,
    and `Connection.recv` then fails on a message that has only partly arrived."""

    def run() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = None
            try:
                loop.call_soon_threadsafe(on_message, message)
            except RuntimeError:  # the loop has closed: nobody is listening any more
                return
            if message is None:
                return

    thread = threading.Thread(target=run, name="bench-pipe", daemon=True)
    thread.start()
    return thread


def use_fast_loop() -> None:
    """uvloop when it is installed (a third less CPU per chunk); asyncio's loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def use_realtime_priority(priority: int = 10) -> None:
    """Run this process (and the worker processes it starts, which inherit it) under Linux's
    `SCHED_FIFO` at `priority`, so that other jobs on a shared host cannot delay a read or a
    send by a scheduler slice. The kernel still keeps 5% of each core for everything else
    (`kernel.sched_rt_runtime_us`). Needs root or CAP_SYS_NICE."""
    if not hasattr(os, "sched_setscheduler"):
        raise SpecError("--realtime needs Linux (SCHED_FIFO); drop the flag")
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError:
        raise SpecError(
            "--realtime: not permitted to use SCHED_FIFO; run as root, grant CAP_SYS_NICE "
            "(setcap cap_sys_nice+ep on the interpreter) or drop the flag"
        ) from None


def worker_main(
    conn: Connection, target: Target, prewarm: int, name: str, kernel_timestamps: bool = False
) -> None:
    """Entry point of a worker process: run jobs from the pipe, send outcomes back."""
    # NOTE: Ctrl-C, a closed terminal and `kill -TERM -PGID` reach the whole process group. The
    # driver handles them and stops each worker through its pipe, which also ends a worker
    # whose driver died; a worker that died of the signal first lost its jobs in flight as
    # failed requests, a race the driver lost on a busy host.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    use_fast_loop()
    asyncio.run(_worker(conn, target, prewarm, name, kernel_timestamps))


async def _worker(
    conn: Connection, target: Target, prewarm: int, name: str, kernel_timestamps: bool
) -> None:
    loop = asyncio.get_running_loop()
    outbox: list[Outcome] = []
    flush_armed = False

    def flush() -> None:
        nonlocal flush_armed
        flush_armed = False
        if outbox:
            conn.send(("outcomes", list(outbox)))
            outbox.clear()

    def on_outcome(outcome: Outcome) -> None:
        nonlocal flush_armed
        outbox.append(outcome)
        if not flush_armed:
            flush_armed = True
            loop.call_later(FLUSH_INTERVAL_S, flush)

    sender = LocalSender(target, on_outcome, prewarm, name, kernel_timestamps)
    await sender.start()
    conn.send(("ready", name))
    stopped: asyncio.Future[bool] = loop.create_future()

    def on_message(message: tuple[str, Any] | None) -> None:
        if message is None or message[0] == "stop":
            if not stopped.done():
                stopped.set_result(True if message is None else bool(message[1]))
        elif message[0] == "jobs":
            for job in message[1]:
                sender.submit(job)

    reader = start_pipe_reader(conn, loop, on_message)
    cancel = await stopped
    await sender.stop(cancel)
    flush()
    conn.send(("health", sender.health()))
    conn.close()
    reader.join(timeout=1.0)


class ProcessSender:
    def __init__(
        self,
        target: Target,
        on_outcome: OnOutcome,
        num_workers: int,
        prewarm: int = 32,
        kernel_timestamps: bool = False,
    ) -> None:
        assert num_workers > 1, "use LocalSender for one process"
        self.kernel_timestamps = kernel_timestamps
        self.target = target
        self.on_outcome = on_outcome
        self.num_workers = num_workers
        self.prewarm = prewarm
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        self._batches: list[list[Job]] = []
        self._jobs: list[dict[int, Job]] = []  # per worker: handed over, no outcome back yet
        self._is_alive: list[bool] = []
        self._is_stopping = False
        self._next = 0
        self._health: list[dict[str, Any]] = []
        self._closed: list[asyncio.Future[None]] = []
        self._readers: list[threading.Thread] = []
        self.monitor = LagMonitor()

    async def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        loop = asyncio.get_running_loop()
        per_worker = max(1, self.prewarm // self.num_workers)
        for i in range(self.num_workers):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=worker_main,
                args=(child, self.target, per_worker, f"worker-{i}", self.kernel_timestamps),
                daemon=True,
            )
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
            self._batches.append([])
            self._jobs.append({})
            self._is_alive.append(True)
        for worker, conn in enumerate(self._conns):
            try:
                ready = await loop.run_in_executor(None, conn.recv)
            except (EOFError, OSError):  # it died before it said it was ready
                ready = None
            if not (isinstance(ready, tuple) and ready[0] == "ready"):
                self._abandon()
                raise InhouseError(self._start_failure(worker))
        for i, conn in enumerate(self._conns):
            closed: asyncio.Future[None] = loop.create_future()
            self._closed.append(closed)
            self._readers.append(start_pipe_reader(conn, loop, self._handler(i, closed)))
        self.monitor.start()

    def _abandon(self) -> None:
        """Start-up failed: every worker goes, none is left running without its driver."""
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
        for proc in self._procs:
            proc.join(timeout=5)
        for conn in self._conns:
            conn.close()

    def _start_failure(self, worker: int) -> str:
        proc = self._procs[worker]
        code = proc.exitcode
        if code is None:
            how = "stopped answering"
        elif code < 0:
            how = f"was killed by {_signal_name(-code)}"
        else:
            how = f"exited with code {code}"
        return (
            f"worker-{worker} (pid {proc.pid}) {how} while starting, before it was ready (its "
            f"error, if it printed one, is above); a kill, the OOM killer (see `dmesg`) or a "
            f"broken install stops a worker this early: check the host has the memory for "
            f"{self.num_workers} client processes, or run with fewer --workers (--workers 1 "
            f"runs the client in this process)"
        )

    def _handler(
        self, worker: int, closed: asyncio.Future[None]
    ) -> Callable[[tuple[str, Any] | None], None]:
        def on_message(message: tuple[str, Any] | None) -> None:
            if message is None:
                # A worker sends every outcome before it closes its pipe: any job still
                # without one was lost with a worker that died. Once stopped, it is a job
                # whose time had not come (never sent), as in `LocalSender.stop`.
                if self._is_stopping:
                    self._jobs[worker].clear()
                self._lose(worker)
                if not closed.done():
                    closed.set_result(None)
            elif message[0] == "outcomes":
                jobs = self._jobs[worker]
                for outcome in message[1]:
                    jobs.pop(outcome.index, None)
                    self.on_outcome(outcome)
            elif message[0] == "health":
                self._health.extend(message[1])

        return on_message

    def submit(self, job: Job) -> None:
        """Hand `job` to the next live worker, round-robin."""
        for _ in range(self.num_workers):
            worker = self._next
            self._next = (self._next + 1) % self.num_workers
            if self._is_alive[worker]:
                self._batches[worker].append(job)
                self._jobs[worker][job.index] = job
                return
        self.on_outcome(_lost(job, "every worker process has exited"))

    def flush(self) -> None:
        for worker, (conn, batch) in enumerate(zip(self._conns, self._batches, strict=True)):
            if batch:
                try:
                    conn.send(("jobs", list(batch)))
                except OSError:  # the worker has died; its reader has not seen it yet
                    self._lose(worker)
                    self.flush()  # what it had not been sent went to the others
                    return
                batch.clear()

    def _lose(self, worker: int) -> None:
        """A worker has died: the jobs it holds fail as lost; those not sent to it yet go to
        the others."""
        if not self._is_alive[worker]:
            return
        self._is_alive[worker] = False
        unsent, self._batches[worker] = self._batches[worker], []
        jobs = self._jobs[worker]
        for job in unsent:
            del jobs[job.index]
        for job in jobs.values():
            self.on_outcome(_lost(job, f"worker-{worker} exited before its answer came back"))
        jobs.clear()
        for job in unsent:
            self.submit(job)

    async def stop(self, cancel: bool) -> None:
        self.flush()
        self._is_stopping = True
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(("stop", cancel))
        await asyncio.gather(*self._closed)
        for proc in self._procs:
            proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        for reader in self._readers:
            reader.join(timeout=1.0)
        self.monitor.stop()

    def health(self) -> list[dict[str, Any]]:
        parent = self.monitor.report("driver")
        return [parent, *self._health]


def _lost(job: Job, why: str) -> Outcome:
    """The outcome of a job a worker process took with it when it died."""
    return Outcome(job.index, job.t_sched, error=f"lost: {why} (out of memory? see the system log)")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_stack() -> dict[str, str]:
    return {"event_loop": loop_kind(), "json": JSON_LIBRARY, "scheduling": scheduling_policy()}


def scheduling_policy() -> str:
    """ "realtime" when the client runs under SCHED_FIFO (`--realtime`), else "normal"."""
    getter = getattr(os, "sched_getscheduler", None)
    if getter is None:
        return "normal"
    return "realtime" if getter(0) in (os.SCHED_FIFO, os.SCHED_RR) else "normal"

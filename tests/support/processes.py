"""Processes a test started, and theirs: who their children are, when they are gone, and
the clean-up that leaves none of them behind whatever the test's outcome."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from inhouse.launch.listeners import busy_ports


def children_of(pid: int) -> list[int]:
    """The running processes whose parent is `pid` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def descendants_of(pid: int) -> list[int]:
    """The running processes below `pid`: its children, theirs, and so on."""
    out, todo = [], [pid]
    while todo:
        found = children_of(todo.pop())
        out += found
        todo += found
    return out


def is_running(pid: int) -> bool:
    """Alive and not a zombie (an orphan is reaped by whoever adopts it, maybe late)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if is_running(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if is_running(p)]


def wait_free(ports: list[int], timeout_s: float) -> list[int]:
    """The ports still held after `timeout_s` (a dead process's sockets close a moment late)."""
    deadline = time.monotonic() + timeout_s
    while (busy := busy_ports("127.0.0.1", ports)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return busy


# What `inhouse up` prints once its stack is ready.
UP_READY = "Ctrl-C stops the stack"


def read_until(process: subprocess.Popen[str], done: Callable[[str], bool]) -> list[str]:
    """The lines `process` prints up to and including the first for which `done` holds (all of
    them, should it end first)."""
    assert process.stdout is not None, "started with stdout=PIPE"
    lines = []
    for line in process.stdout:
        lines.append(line)
        if done(line):
            break
    return lines


def reap(process: subprocess.Popen[str], children: list[int]) -> None:
    """Kill what a test left: `children` (its grandchildren, should their tether have failed)
    and `process` itself, then close its stdout."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if process.poll() is None:
        process.kill()
    process.wait()
    if process.stdout is not None:
        process.stdout.close()

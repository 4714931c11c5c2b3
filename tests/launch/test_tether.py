"""`launch.tether`: a child dies with the process that started it, not with the thread that
asked for it, and not later than its parent when the parent dies first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.processes import is_running, reap, wait_gone

from inhouse.launch.tether import IS_LINUX, TETHER, popen, tethered_argv

pytestmark = pytest.mark.skipif(not IS_LINUX, reason="the tether is Linux's PR_SET_PDEATHSIG")

# A parent that starts a child from asyncio's executor (as the drill starts Prometheus), waits
# until the child runs (its tether set by then), lets the executor's threads end (asyncio.run
# shuts them down), prints the child's pid, and waits. Had the executor's thread forked the
# child, its end would kill the child (PR_SET_PDEATHSIG follows the forking thread).
PARENT = """
import asyncio, subprocess, time
from inhouse.launch.tether import popen
def start():
    child = popen(["sh", "-c", "echo up; exec sleep 60"], stdout=subprocess.PIPE)
    child.stdout.readline()
    return child
async def main():
    return await asyncio.to_thread(start)
child = asyncio.run(main())
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_child_outlives_the_thread_that_started_it_and_dies_with_its_parent() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(0.5)  # the executor's threads are gone by now
        assert is_running(child), "killed when the starting thread ended"
        assert Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0].endswith(b"sleep")
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert wait_gone([child], 5.0) == []
    finally:
        reap(parent, [child] if child else [])


def test_the_tether_refuses_to_run_when_its_parent_is_already_gone() -> None:
    """The parent died between fork and prctl: the child must not run on as an orphan."""
    started = time.monotonic()
    wrong_parent = str(os.getpid() + 1_000_000)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", TETHER, wrong_parent, "--",
                           "sleep", "30"], timeout=20)  # fmt: skip
    assert done.returncode == 71
    assert time.monotonic() - started < 10


def test_the_program_keeps_its_pid_and_its_exit_code() -> None:
    process = popen(["sh", "-c", "echo $$; exit 3"], stdout=subprocess.PIPE)
    out, _ = process.communicate(timeout=20)
    assert int(out) == process.pid
    assert process.returncode == 3


def test_a_missing_program_raises_in_the_caller_as_popen_does() -> None:
    with pytest.raises(FileNotFoundError):
        tethered_argv(["no-such-program-f25"])
    with pytest.raises(FileNotFoundError):
        popen(["no-such-program-f25"])

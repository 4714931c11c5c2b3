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

from inhouse.launch import tether
from inhouse.launch.tether import IS_LINUX, TETHER, popen, tethered_argv

SRC = Path(tether.__file__).resolve().parents[2]

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


# A parent that starts a child in a session of its own (as `up` starts an engine), the child
# starting a worker of its own (as vLLM's API server starts its engine core), and prints the
# three pids: its own keeper's, the child's and the worker's.
PARENT_OF_A_GROUP = """
import subprocess, time
from inhouse.launch import tether
child = tether.popen(["sh", "-c", "sleep 60 & echo $!; exec sleep 60"], stdout=subprocess.PIPE,
                     start_new_session=True)
worker = int(child.stdout.readline())
print(tether._keeper.pid, child.pid, worker, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("how", ["SIGKILL", "exit"])
def test_a_childs_own_workers_die_with_the_parent(how: str) -> None:
    """vLLM's engine core outlived a SIGKILLed `up` (its API server's tether held, but not its
    worker's): the group keeper ends the whole group, whichever way the parent ends."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT_OF_A_GROUP], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    pids: list[int] = []
    try:
        assert parent.stdout is not None
        pids = [int(p) for p in parent.stdout.readline().split()]
        keeper, child, worker = pids
        assert os.getpgid(worker) == child, "the worker is in the child's group"
        assert os.getsid(keeper) == keeper, "the keeper is in a session of its own"
        if how == "SIGKILL":
            parent.send_signal(signal.SIGKILL)
        else:
            parent.send_signal(signal.SIGTERM)  # the default action: the parent just ends
        parent.wait(10)
        assert wait_gone([child, worker], 5.0) == [], "the child's group outlived its parent"
        assert wait_gone([keeper], 5.0) == [], "the keeper outlived its work"
    finally:
        reap(parent, pids)


def test_the_keeper_kills_the_live_groups_it_holds_and_passes_over_dead_ones() -> None:
    """A group whose members are all gone is dropped, not an error: the keeper runs on, and at
    the end kills the live group registered beside it."""
    keeper = subprocess.Popen([sys.executable, "-I", "-S", "-c", tether.KEEPER],
                              stdin=subprocess.PIPE, start_new_session=True)  # fmt: skip
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert keeper.stdin is not None
        dead = subprocess.Popen(["true"], start_new_session=True)
        dead.wait()
        keeper.stdin.write(b"%d\n%d\n" % (dead.pid, victim.pid))
        keeper.stdin.flush()
        time.sleep(1.5)  # one look at /proc
        assert keeper.poll() is None
        keeper.stdin.close()
        assert keeper.wait(10) == 0
        assert victim.wait(10) == -signal.SIGKILL
    finally:
        for process in (keeper, victim):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_parent_that_ends_normally_ends_its_keeper_without_a_resource_warning() -> None:
    """The keeper lives as long as its parent; a parent that exits normally closes the pipe and
    waits for the keeper at exit, so no `Popen.__del__` ResourceWarning ("subprocess ... is
    still running", an unclosed pipe) is printed at interpreter shutdown, and the group it held
    is killed as on any other end."""
    # The last handler registered runs first: this one, registered before tether's module
    # is imported, runs after tether's own and then drops the keeper as the interpreter's
    # teardown of module globals does (when it does: it is not promised, hence this).
    script = (
        "import atexit, gc, subprocess, sys\n"
        "def teardown():\n"
        "    tether._keeper = None\n"
        "    gc.collect()\n"
        "atexit.register(teardown)\n"
        "from inhouse.launch import tether\n"
        "victim = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "tether.keep_group(victim.pid)\n"
        "print(victim.pid, tether._keeper.pid, flush=True)\n"
        "victim.returncode = 0  # this test reaps it; only the keeper's warning is asked about\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-X", "dev", "-c", script], capture_output=True,
                          text=True, timeout=30, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    victim, keeper = (int(p) for p in done.stdout.split())
    assert "ResourceWarning" not in done.stderr, done.stderr
    assert wait_gone([keeper], 0.1) == [], "the keeper was waited for at exit"
    assert wait_gone([victim], 5.0) == [], "the group the keeper held was killed"

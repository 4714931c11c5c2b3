"""Fixtures shared across test directories: a real S3 server (SeaweedFS), started once per
session when a test asks for it (tests/weights/s3_server.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.weights.s3_server import SeaweedS3


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    with SeaweedS3(tmp_path_factory.mktemp("seaweed")) as server:
        yield server

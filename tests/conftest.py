"""Fixtures shared across test directories: a real S3 server (SeaweedFS), started once per
session when a test asks for it (tests/weights/s3_server.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from tests.weights.s3_server import SeaweedS3


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    with SeaweedS3(tmp_path_factory.mktemp("seaweed")) as server:
        yield server


@pytest.fixture(autouse=True)
def _event_loop_policy() -> Iterator[None]:
    """Each test gets the event loop policy it started with: a CLI run in-process (`inhouse
    bench` installs uvloop's) must not change the loop every later test runs on."""
    policy = asyncio.get_event_loop_policy()
    yield
    asyncio.set_event_loop_policy(policy)

"""Fixtures for the `inhouse up` tests: the engine-server tests' free ports."""

from tests.server.conftest import free_port

__all__ = ["free_port"]

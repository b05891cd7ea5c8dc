"""The Valkey tests' server: here every server fixture of tests/conftest.py (``redis_server``,
``redis_url``, ``redis_client``, ``own_redis``) runs valkey-server, whatever
CRAWLFLEET_TEST_SERVER says, so `make test` covers Valkey without running the suite twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.lifecycle import running

from redis_server import RedisServer, server_binary, start_redis


@pytest.fixture(scope="session")
def redis_server_binary() -> str:
    binary = server_binary("valkey")
    if not Path(binary).exists():
        pytest.fail(f"{binary} not found: `make install` installs valkey-server", pytrace=False)
    return binary


@pytest.fixture(scope="package")
def redis_server(
    tmp_path_factory: pytest.TempPathFactory, redis_server_binary: str
) -> Iterator[RedisServer]:
    """One valkey-server for this directory; tests get a flushed database through ``redis_url``."""
    yield from running(start_redis(tmp_path_factory.mktemp("valkey"), server=redis_server_binary))

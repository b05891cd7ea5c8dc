"""Shared fixtures: a real redis-server on a free loopback port, started and stopped by pytest
(valkey-server when CRAWLFLEET_TEST_SERVER=valkey: the ``redis_server_binary`` fixture);
the frontier's crawl fixtures (tests/support/crawl.py) and its two backends with the session's
RabbitMQ broker (tests/support/backends.py), registered here once for every test directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, settings
from support.backends import backend, queue_name, rabbit, rabbit_url
from support.crawl import site, start_worker
from support.lifecycle import running

from redis_server import RedisServer, server_binary, start_redis

__all__ = [
    "RedisServer",
    "backend",
    "queue_name",
    "rabbit",
    "rabbit_url",
    "site",
    "start_redis",
    "start_worker",
]

# Property-based (fuzz) tests: a bounded budget in `make test` ("ci", the default) and a larger one
# in `make fuzz` (`--hypothesis-profile=fuzz`). No deadline: these machines are shared and noisy,
# and a slow example is not a failure; a hang is caught by pytest-timeout.
_FUZZ_SUPPRESS = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=_FUZZ_SUPPRESS, derandomize=True
)
settings.register_profile(
    "fuzz", max_examples=5000, deadline=None, suppress_health_check=_FUZZ_SUPPRESS
)
settings.load_profile("ci")


@pytest.fixture(scope="session")
def redis_server_binary() -> str:
    """The server the fixtures below run: redis-server, or what CRAWLFLEET_TEST_SERVER names."""
    return server_binary()


@pytest.fixture(scope="session")
def redis_server(
    tmp_path_factory: pytest.TempPathFactory, redis_server_binary: str
) -> Iterator[RedisServer]:
    """One redis-server for the session; tests get a flushed database through ``redis_url``."""
    yield from running(start_redis(tmp_path_factory.mktemp("redis"), server=redis_server_binary))


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    if redis_server.process.poll() is not None:
        redis_server.start()
    client = redis_server.client()
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def own_redis(tmp_path: Path, redis_server_binary: str) -> Iterator[RedisServer]:
    """A private redis-server a test may stop, restart or kill (AOF on, in tmp_path)."""
    yield from running(start_redis(tmp_path, server=redis_server_binary))

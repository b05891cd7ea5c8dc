"""Fixtures of the Redis Cluster tests: a fresh six-node cluster for a test that stops nodes, one
shared by a module's tests that never do (emptied before each of them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.lifecycle import running
from support.rediscluster import RedisClusterGroup, start_redis_cluster


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[RedisClusterGroup]:
    """Three primaries with one replica each on free loopback ports, for one test."""
    yield from running(start_redis_cluster(tmp_path / "cluster"))


@pytest.fixture(scope="module")
def steady_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterGroup]:
    """The same cluster for a whole module whose tests never stop one of its nodes."""
    yield from running(start_redis_cluster(tmp_path_factory.mktemp("cluster")))


@pytest.fixture
def cluster(steady_cluster: RedisClusterGroup) -> RedisClusterGroup:
    """The module's cluster with every primary emptied (and its replicas after it)."""
    steady_cluster.flush()
    return steady_cluster

"""Fixtures of the Sentinel tests: a fresh Sentinel group for a test that kills a primary, one
shared by a module's tests that only read through it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.lifecycle import running
from support.sentinel import SentinelGroup, start_sentinel_group


@pytest.fixture
def sentinel_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    """One primary, two replicas and three Sentinels (quorum 2) on free loopback ports."""
    yield from running(start_sentinel_group(tmp_path / "sentinel"))


@pytest.fixture(scope="module")
def steady_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    """The same group for a whole module whose tests never stop one of its processes."""
    yield from running(start_sentinel_group(tmp_path_factory.mktemp("sentinel")))

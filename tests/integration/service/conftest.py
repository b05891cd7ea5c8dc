"""Fixtures of the shared-runtime tests: the four hub services started once per module."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from hubservice_procs import KINDS, HubService, start_service

from redis_server import RedisServer


@pytest.fixture(scope="module")
def hub(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> Iterator[dict[str, HubService]]:
    """``proxypool``, ``accountpool``, ``dashboard``, ``demosite`` (with API keys where there
    are keys) and ``openpool`` (a proxy pool without one, the default loopback mode)."""
    tmp = tmp_path_factory.mktemp("hub")
    jobs = [(kind, kind, True) for kind in KINDS] + [("openpool", "proxypool", False)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {
            name: pool.submit(
                start_service, kind, tmp, redis_server.url, **({} if keyed else {"api_key": None})
            )
            for name, kind, keyed in jobs
        }
        services = {name: future.result() for name, future in futures.items()}
    yield services
    for service in services.values():
        if service.process.poll() is None:
            service.process.kill()
            service.process.wait(timeout=10)

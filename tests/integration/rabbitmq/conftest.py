"""Fixtures of the RabbitMQ tests: one broker per session (Erlang boots slowly), the frontier's
link-graph site and crawl workers (frontier_support.py, loaded by path as the operator tests do).
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from rabbitmq_server import RabbitServer, start_rabbitmq

ROOT = Path(__file__).resolve().parents[3]

if "frontier_support" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "frontier_support", ROOT / "tests/integration/frontier/frontier_support.py"
    )
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _module
    _spec.loader.exec_module(_module)

frontier_support = sys.modules["frontier_support"]
site = frontier_support.site
start_worker = frontier_support.start_worker


@pytest.fixture(scope="session")
def rabbit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitServer]:
    server = start_rabbitmq(tmp_path_factory.mktemp("rabbitmq"))
    yield server
    server.close()


@pytest.fixture
def rabbit_url(rabbit: RabbitServer) -> str:
    """The session broker's URL, with the broker running (a test may have stopped it)."""
    if not rabbit.running():
        rabbit.start()
    return rabbit.url


@pytest.fixture
def queue_name(rabbit_url: str) -> Iterator[str]:
    """A fresh queue name, deleted after the test."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    connection = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    connection.channel().queue_delete(name)
    connection.close()

"""The frontier tests' scheduler factory: ``make_scheduler(**settings)`` over
``scheduler_defaults`` (none here; a module overrides that fixture to add its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.schedulers import MakeScheduler, schedulers


@pytest.fixture
def scheduler_defaults() -> dict[str, object]:
    return {}


@pytest.fixture
def make_scheduler(
    redis_url: str, scheduler_defaults: dict[str, object]
) -> Iterator[MakeScheduler]:
    with schedulers(redis_url, scheduler_defaults) as make:
        yield make

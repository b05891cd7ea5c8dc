"""The one shape of a fixture that owns a server: start it, hand it to the tests, stop it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, TypeVar


class Stoppable(Protocol):
    def stop(self) -> None: ...


S = TypeVar("S", bound=Stoppable)


def running(server: S) -> Iterator[S]:
    """``yield from running(start_…(…))`` in a fixture: the started server for its tests, stopped
    at the fixture's teardown (which pytest runs whatever the tests did)."""
    yield server
    server.stop()

"""A full hub, as one worker process sees it: Redis refusing writes at ``maxmemory``.

The hub's Redis runs with ``noeviction``: once ``used_memory`` reaches ``maxmemory`` every write
that adds data is refused with ``OOM command not allowed when used memory > 'maxmemory'`` (a
script is refused at its first such write, before it has changed anything). The frontier, the
items pipeline and the worker statistics keep what was refused and try again; a
:class:`FullHub` turns the refusals of one episode into one warning when it starts and one line
when Redis takes a write again, and spaces the retries (doubling up to a maximum) meanwhile.
"""

from __future__ import annotations

import logging
import time

import redis


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a write at ``maxmemory`` (``OOM …``)."""
    return isinstance(exc, redis.exceptions.OutOfMemoryError)


class FullHub:
    """One process's episodes of a full hub: logged once each, retries spaced out."""

    def __init__(
        self, logger: logging.Logger, who: str, retry_min: float = 0.2, retry_max: float = 2.0
    ) -> None:
        self.logger = logger
        self.who = who
        self.retry_min = retry_min
        self.retry_max = max(retry_min, retry_max)
        self.since: float | None = None  # monotonic time of the episode's first refusal
        self.refusals = 0  # of the current episode
        self.retry_wait = retry_min  # seconds from the last refusal to the next retry
        self._retry_at = 0.0

    def refused(self, what: str, meanwhile: str, where: str) -> None:
        """Redis at ``where`` (a masked URL) refused ``what`` with OOM; ``meanwhile`` says what
        the caller does until it has room ("keeping 3 item(s)")."""
        now = time.monotonic()
        self.refusals += 1
        if self.since is None:
            self.since = now
            self.retry_wait = self.retry_min
            self.logger.warning(
                "%s: the hub's Redis at %s is full (maxmemory reached: %s refused with OOM); "
                "%s, retrying until it has room",
                self.who,
                where,
                what,
                meanwhile,
            )
        else:
            self.retry_wait = min(2 * self.retry_wait, self.retry_max)
        self._retry_at = now + self.retry_wait

    def waiting(self) -> bool:
        """True while a full hub's next retry is not due yet (skip the round trip)."""
        return self.since is not None and time.monotonic() < self._retry_at

    def accepted(self) -> None:
        """Redis took a write: end the episode, if one was running, with one line."""
        if self.since is None:
            return
        self.logger.warning(
            "%s: the hub has room again; resuming after %.1f s full (%d write(s) refused)",
            self.who,
            time.monotonic() - self.since,
            self.refusals,
        )
        self.since = None
        self.refusals = 0

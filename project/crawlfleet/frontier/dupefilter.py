"""Duplicate filters kept in Redis, shared by every worker of a crawl.

A frontier dupefilter can be used two ways:

* on its own, through Scrapy's ``request_seen()`` (one atomic round trip per request), and
* inside the scheduler's enqueue script, so that "is it new? then push it" is one atomic round
  trip. For that the filter contributes a Lua function and, per request, the key and argument
  that function needs (see :class:`RedisDupeFilter`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from scrapy import Request
from scrapy.dupefilters import BaseDupeFilter


class RedisDupeFilter(BaseDupeFilter, ABC):
    """Contract between a Redis dupefilter and the frontier scheduler.

    ``LUA_CHECK_AND_ADD`` is Lua source that defines ``local function check_and_add(key, arg)``
    returning 1 when the fingerprint was new (and is now recorded) and 0 when it was seen before.
    The scheduler pastes it into its enqueue script and calls it with ``script_item(request)``.
    """

    LUA_CHECK_AND_ADD: str

    @abstractmethod
    def script_item(self, request: Request) -> tuple[str, bytes]:
        """The (key, argument) pair that ``check_and_add`` receives for ``request``."""

    @abstractmethod
    def clear(self) -> None:
        """Forget every fingerprint (``SCHEDULER_FLUSH_ON_START``); never called on close."""

"""Classic spiders start on the fleet: a ``start_requests()`` spider runs its start requests.

Scrapy 2.13 introduced ``async def start()`` and Scrapy 2.19 (the version crawlfleet pins) no
longer calls the classic synchronous ``start_requests()`` at all: the default ``start()`` reads
only ``start_urls``. Spiders written the way the Scrapy tutorial and most books teach define
``start_requests()``, and on Scrapy 2.19 they silently crawl nothing. :func:`adopt_start_requests`
gives such a spider a ``start()`` that runs its ``start_requests()``, lazily, one request at a
time as the engine asks, exactly as Scrapy < 2.13 did.

It applies only when ``start_requests()`` is the more specific of the two: defined by the spider's
class (or a base) at least as derived as the class that defines ``start()``. A spider that defines
its own ``start()`` keeps it; a subclass of ``SitemapSpider`` (which defines ``start()``) that adds
``start_requests()`` gets it, as it did on older Scrapy.

The frontier scheduler calls it when it is built (before Scrapy reads the start requests), so a
project needs nothing but the scheduler setting. It also calls :func:`keep_start_items_if`: one
worker of a crawl seeds it, and the others drop their start requests (the scheduler counts them as
``scheduler/start_skipped``); items a ``start()`` yields are part of that seeding, so they are
kept only on the seeding worker (the others count them as ``scheduler/start_items_skipped``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from scrapy import Request, Spider

logger = logging.getLogger(__name__)

__all__ = ["adopt_start_requests", "keep_start_items_if"]


def _defining_class(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO whose own namespace defines ``name`` (None: none does)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def uses_start_requests(cls: type[Spider]) -> bool:
    """Whether ``cls`` starts with ``start_requests()`` (as before Scrapy 2.13), not ``start()``."""
    classic = _defining_class(cls, "start_requests")
    if classic is None:
        return False
    modern = _defining_class(cls, "start")
    # The class that defines start_requests() is at least as derived as the one defining start().
    return modern is None or issubclass(classic, modern)


def adopt_start_requests(spider: Spider) -> bool:
    """Make ``spider.start()`` run ``spider.start_requests()`` where that is what the spider means.

    Returns True when the spider was adapted (idempotent: a second call changes nothing).
    """
    if "start" in vars(spider) or not uses_start_requests(type(spider)):
        return False

    async def start() -> AsyncIterator[Any]:
        produced = spider.start_requests()  # type: ignore[attr-defined]
        if produced is None:
            return
        if hasattr(produced, "__aiter__"):
            async for item_or_request in produced:
                yield item_or_request
        else:
            for item_or_request in produced:
                yield item_or_request

    spider.start = start  # type: ignore[method-assign]
    logger.info(
        "Spider %r defines start_requests() and not start(); crawlfleet runs start_requests() "
        "as its start (Scrapy 2.19 itself no longer calls it)",
        spider.name,
        extra={"spider": spider},
    )
    return True


def keep_start_items_if(spider: Spider, seeding: Callable[[], bool]) -> None:
    """Let items from ``spider.start()`` through only while ``seeding()`` is true.

    Requests always pass (the scheduler decides what to do with start requests). ``seeding`` is
    asked per item, when the engine reads it: after the scheduler has opened and claimed (or not)
    the seeding of the crawl.
    """
    original = spider.start

    async def start() -> AsyncIterator[Any]:
        async for item_or_request in original():
            if isinstance(item_or_request, Request) or seeding():
                yield item_or_request
            elif spider.crawler.stats is not None:
                spider.crawler.stats.inc_value("scheduler/start_items_skipped")

    spider.start = start  # type: ignore[method-assign]

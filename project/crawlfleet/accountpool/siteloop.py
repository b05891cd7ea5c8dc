"""What the generator and the tester share: one pass over every site, per site a bounded pool.

A ``SiteLoop`` holds the store, the site adapters and the HTTP client; ``run_once`` runs
``run_site`` for each site in turn, and ``each`` works through one site's items with at most
``concurrency`` in flight, stopping as soon as a result says the site is unavailable (an outage
or throttling says nothing about the remaining accounts, so they are left alone).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Generic, TypeVar

import httpx

from crawlfleet.accountpool.adapters import SiteAdapter
from crawlfleet.accountpool.store import AccountStore

T = TypeVar("T")
R = TypeVar("R", bound="SiteResult")


@dataclass
class SiteResult:
    """One site's cycle: its counters, and why it stopped early (None if it did not)."""

    site: str
    counts: Counter[str] = field(default_factory=Counter)
    unavailable: str | None = None


@dataclass(eq=False)
class SiteLoop(Generic[R]):
    store: AccountStore
    adapters: Mapping[str, SiteAdapter]
    client: httpx.AsyncClient
    _: KW_ONLY
    concurrency: int  # items in flight per site

    async def run_once(self) -> list[R]:
        return [await self.run_site(site) for site in self.adapters]

    async def run_site(self, site: str) -> R:
        raise NotImplementedError

    async def each(
        self, items: Sequence[T], work: Callable[[T], Awaitable[None]], result: SiteResult
    ) -> None:
        """``work`` on every item, ``concurrency`` at a time, until the site is unavailable."""
        pending = iter(items)

        async def worker() -> None:
            for item in pending:  # shared iterator: each worker takes the next item
                if result.unavailable is not None:
                    return
                await work(item)

        await asyncio.gather(*(worker() for _ in range(min(self.concurrency, len(items)))))

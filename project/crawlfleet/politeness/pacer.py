"""The crawl's politeness pacer: which (proxy, key) a request goes out through, and when.

One :class:`Pacer` per crawler (:func:`pacer_for` caches it on the crawler), shared by the frontier
scheduler, the ProxyMiddleware and the PolitenessMiddleware, over one :class:`Budget` on the
crawl's Redis. The ProxyMiddleware registers the proxies it may use now (``use_proxies``); for a
request the pacer considers every (proxy, ``site@proxy`` key) pair and picks the one whose slot
comes first — a pair in cool-down comes last by itself: its budget's next slot is the cool-down's
end. Without proxies the key is the site alone.

The scheduler calls :meth:`Pacer.choose` over its buffered requests (Mercator-style: served by the
time their key may next be hit, buffer order kept within a key) and hands out the one whose slot
it took; :data:`META_SLOT` tells the middleware that the request holds a slot of that key. The
pacer is on when ``DOWNLOADER_MIDDLEWARES`` enables the PolitenessMiddleware (the Fleet add-on does
with a ``REDIS_URL``); ``POLITENESS_ENABLED = False`` or no ``REDIS_URL`` turns it off
(``pacer_for`` returns None). The frontier scheduler refuses to start with a ``REDIS_URL`` and
neither (:func:`missing_middleware`): no silent per-worker pacing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawlfleet.hub.connect import redis_from_settings
from crawlfleet.politeness.budget import Budget, Outcome, classify
from crawlfleet.politeness.config import PolitenessConfig, PolitenessConfigError
from crawlfleet.settingtable import default
from crawlfleet.settingtable.values import flag

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

# request.meta: the key whose slot the request holds (set where the slot was taken) and when that
# slot's window closes (this process's clock: a request sent later takes a new slot), the proxy
# the scheduler chose for it (the ProxyMiddleware uses it while it is usable), and the key the
# request was sent with (its response's outcome is recorded there).
META_SLOT = "politeness_slot"
META_PROXY = "politeness_proxy"
META_KEY = "politeness_key"
META_SLOT_UNTIL = "politeness_slot_until"
# The same ProxyMiddleware marker (meta["proxy"] set by the middleware, not by the spider).
PROXYPOOL_META = "proxypool_proxy"

# Seconds a request the scheduler handed out with a slot may take to reach the
# PolitenessMiddleware (at most the slot's own window): one that waited longer in the middlewares
# before it — for a token or a proxy — takes a new slot there. Sent late in a long window (217 ms
# at 4.6/s), it went out just before the next slot: two requests 49 ms apart, six in one second.
HANDOUT_SLACK = 0.05
# How often (s) the scheduler asks again while the ProxyMiddleware has no proxy yet.
UNSLOTTED_POLL = 0.02

_ATTRIBUTE = "_crawlfleet_pacer"
MIDDLEWARE = "crawlfleet.politeness.middleware.PolitenessMiddleware"


@dataclass(frozen=True)
class Choice:
    """What :meth:`Pacer.choose` found: the index of a request that now holds a slot of ``key``
    (through ``proxy``), or None and the seconds until a slot of a buffered key may be due."""

    index: int | None
    key: str = ""
    proxy: str | None = None
    wait: float = 0.0


class Pacer:
    """One crawl's politeness: the budget, the proxies it may use, and the choice between them."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.config: PolitenessConfig = budget.config
        self._proxies: Callable[[], Sequence[str]] = tuple
        self._proxied = False  # a ProxyMiddleware registered its proxies
        self._unslotted_at = -math.inf  # when a request last went out without a slot
        # site -> robots.txt Crawl-delay (s), re-split when the number of proxies changes
        self._crawl_delays: dict[str, float] = {}
        self._split = 1

    # -- proxies

    def use_proxies(self, source: Callable[[], Sequence[str]]) -> None:
        """The ProxyMiddleware's proxies usable now (proxy URLs), asked at every choice."""
        self._proxies = source
        self._proxied = True

    def proxies(self) -> list[str | None]:
        """The egress candidates: the registered proxies, or a direct connection when none."""
        found: list[str | None] = list(self._proxies())
        if len(found) != self._split and found:
            self._split = len(found)
            for site, delay in self._crawl_delays.items():
                self._apply_crawl_delay(site, delay, found)
        return found or [None]

    def _candidates(self, request: Request) -> list[str | None]:
        meta = request.meta
        if meta.get("proxy") and PROXYPOOL_META not in meta:
            return [str(meta["proxy"])]  # the spider chose the proxy itself
        return self.proxies()

    # -- keys and slots

    def key(self, url: str, proxy: str | None) -> str:
        return self.budget.key_for(url, proxy)

    def holds_slot(self, request: Request, key: str) -> bool:
        """Whether ``request`` holds a slot of ``key`` whose window is still open (the slot is
        used up by this call). A request that reached the downloader late — it waited for a
        token, say — or through another proxy than the scheduler chose takes a new slot."""
        slot = request.meta.pop(META_SLOT, None)
        until = request.meta.pop(META_SLOT_UNTIL, 0.0)
        return slot == key and self.budget.clock() <= float(until)

    def best(self, url: str, candidates: Sequence[str | None]) -> tuple[float, str | None]:
        """(when, proxy): the candidate whose key's slot comes first (earliest, then listed)."""
        when, _, proxy = min(
            ((self.budget.next_allowed(self.key(url, p)), i, p) for i, p in enumerate(candidates)),
            key=lambda found: (found[0], found[1]),
        )
        return when, proxy

    def choose(self, requests: Sequence[Request]) -> Choice:
        """Take a slot for the buffered request whose key may be hit first; or say how long to
        wait. Within a site the first request in ``requests`` order goes first (priority holds
        within a key); each site's lease asks for about as many slots as it has requests waiting
        per proxy. At most one hub round trip per (site, proxy) pair that is due now. While the
        ProxyMiddleware has no usable proxy, one request a second goes without a slot (``key``
        "")."""
        if self._proxied and requests and not self._proxies():
            return self._without_proxies(requests[0])
        clock = self.budget.clock
        first: dict[str, int] = {}  # site -> index of its first request
        waiting: dict[str, int] = {}
        for index, request in enumerate(requests):
            site = self.budget.site_of(self.key(request.url, None))
            first.setdefault(site, index)
            waiting[site] = waiting.get(site, 0) + 1
        # each site's egress candidates, asked once per choice (the lease share needs their count)
        candidates = {index: self._candidates(requests[index]) for index in first.values()}
        pairs: list[tuple[float, int, str, str | None]] = []
        for index, proxies in candidates.items():
            for proxy in proxies:
                key = self.key(requests[index].url, proxy)
                pairs.append((self.budget.next_allowed(key), index, key, proxy))
        pairs.sort(key=lambda pair: (pair[0], pair[1]))
        now = clock()
        for when, index, key, proxy in pairs:
            if when > now:
                break
            site = self.budget.site_of(key)
            share = math.ceil(waiting[site] / max(len(candidates[index]), 1))
            if self.budget.acquire(key, min(share, self.config.lease_size)) == 0.0:
                until = min(self.budget.taken_until, clock() + HANDOUT_SLACK)
                self.mark(requests[index], key, proxy, until)
                return Choice(index, key, proxy)
            now = clock()
        due = min((self.budget.next_allowed(key) for _, _, key, _ in pairs), default=now)
        return Choice(None, wait=max(due - clock(), 0.001))

    def _without_proxies(self, request: Request) -> Choice:
        """The ProxyMiddleware has no usable proxy yet (its first batch from the pool, say).

        One request a second goes out without a slot: it waits in the ProxyMiddleware (which
        fetches a batch for it), then takes a slot of its proxy's key in the
        PolitenessMiddleware. A slot taken here, for a direct connection, would be wasted; and
        handing out more at once would queue them all on the first proxy's key. The others wait
        here until the proxies are known (the scheduler asks again in ``UNSLOTTED_POLL``)."""
        now = self.budget.clock()
        if now - self._unslotted_at < 1.0:
            return Choice(
                None, wait=max(min(UNSLOTTED_POLL, self._unslotted_at + 1.0 - now), 0.001)
            )
        self._unslotted_at = now
        for name in (META_SLOT, META_SLOT_UNTIL, META_PROXY):
            request.meta.pop(name, None)
        return Choice(0)

    @staticmethod
    def mark(request: Request, key: str, proxy: str | None, until: float) -> None:
        """The request holds a slot of ``key`` until ``until``; the ProxyMiddleware sends it
        through ``proxy``."""
        request.meta[META_SLOT] = key
        request.meta[META_SLOT_UNTIL] = until
        if proxy is None:
            request.meta.pop(META_PROXY, None)
        else:
            request.meta[META_PROXY] = proxy

    # -- outcomes

    def record(
        self,
        key: str,
        status: int,
        body: bytes,
        retry_after: bytes | None,
        latency: float | None = None,
    ) -> Outcome:
        outcome = classify(self.config, status, body, retry_after, latency)
        self.budget.record(key, outcome)
        return outcome

    def set_crawl_delay(self, site: str, delay: float | None) -> None:
        """robots.txt's Crawl-delay for ``site``, for the whole crawl: the site's own key gets
        it, and each of N proxies' ``site@proxy`` keys gets N times the delay, so N proxies together
        still send at most one request per delay (re-split when N changes)."""
        proxies = [p for p in self._proxies() if p]
        if delay is None or delay <= 0:
            self._crawl_delays.pop(site, None)
            self._apply_crawl_delay(site, None, proxies)
            return
        self._crawl_delays[site] = delay
        self._apply_crawl_delay(site, delay, proxies)

    def _apply_crawl_delay(
        self, site: str, delay: float | None, proxies: Sequence[str | None]
    ) -> None:
        self.budget.set_crawl_delay(site, delay)
        for proxy in proxies:
            if proxy:
                split = None if delay is None else delay * len(proxies)
                self.budget.set_crawl_delay(f"{site}@{proxy}", split)

    def close(self) -> None:
        """Give back the held slots that no one else has leased after."""
        self.budget.release_all()


def build_pacer(crawler: Crawler) -> Pacer | None:
    """A new pacer from the crawler's settings; None when politeness is off or there is no
    Redis. A bad setting raises ``PolitenessConfigError`` (one line naming it), logged here."""
    settings = crawler.settings
    name = crawler.spider.name if crawler.spider is not None else crawler.spidercls.name
    try:
        config = PolitenessConfig.from_settings(settings, name)
    except PolitenessConfigError as exc:
        logger.critical("Politeness cannot start: %s", exc)
        raise
    if not config.enabled or not settings.get("REDIS_URL") or not _middleware_on(crawler):
        return None

    return Pacer(Budget(redis_from_settings(settings, check=False), config))


def missing_middleware(crawler: Crawler) -> str | None:
    """Why the frontier must not start unpaced, in one line; None when it may.

    A scrapy-redis project moved over by class paths (``SCHEDULER``, ``DUPEFILTER_CLASS``,
    ``REDIS_URL``) would crawl with no budget at all: each worker at its own pace. It gets the
    budget when DOWNLOADER_MIDDLEWARES lists the PolitenessMiddleware (the Fleet add-on does),
    or says it wants none with ``POLITENESS_ENABLED = False``."""
    settings = crawler.settings
    if not settings.get("REDIS_URL") or _middleware_on(crawler):
        return None
    try:
        if not flag(
            settings, "POLITENESS_ENABLED", default("POLITENESS_ENABLED"), PolitenessConfigError
        ):
            return None
    except PolitenessConfigError as exc:
        logger.critical("Politeness cannot start: %s", exc)
        raise
    return (
        f"the cluster's politeness budget is off: add DOWNLOADER_MIDDLEWARES = "
        f"{{'{MIDDLEWARE}': 750}} (or ADDONS = {{'crawlfleet.addon.Fleet': 0}}), "
        "or set POLITENESS_ENABLED = False to crawl without it"
    )


def _middleware_on(crawler: Crawler) -> bool:
    """Whether DOWNLOADER_MIDDLEWARES enables the PolitenessMiddleware (the pacer needs it: it
    records outcomes and gives slots to the requests the scheduler did not pace)."""
    from scrapy.utils.conf import build_component_list

    for entry in build_component_list(crawler.settings.getwithbase("DOWNLOADER_MIDDLEWARES")):
        name = entry if isinstance(entry, str) else f"{entry.__module__}.{entry.__qualname__}"
        if name == MIDDLEWARE:
            return True
    return False


def pacer_for(crawler: Crawler) -> Pacer | None:
    """The crawler's one pacer (built at the first ask: scheduler or middleware)."""
    if not hasattr(crawler, _ATTRIBUTE):
        setattr(crawler, _ATTRIBUTE, build_pacer(crawler))
    pacer: Pacer | None = getattr(crawler, _ATTRIBUTE)
    return pacer

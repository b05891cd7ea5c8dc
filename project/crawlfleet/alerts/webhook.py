"""The dashboard's alert loop and its webhook: evaluate every interval, POST what changed.

:class:`Monitor` evaluates the alerts every ``--sample-interval`` in a worker thread (it keeps
the rules' state in Redis fresh for ``crawlfleet status`` even without a webhook). With
``--alert-webhook URL`` each alert that starts firing and each that resolves becomes one JSON
``POST`` (docs/alerts.md has the body), delivered in order by one background task: each attempt
has a timeout, a failed one is retried with doubling back-off, and a receiver that is down or
slow only delays the next notifications, never a page or ``/metrics``. Undeliverable events are
logged and dropped after the last attempt; at most ``QUEUE_LIMIT`` wait (the oldest go first).

What the receiver was told is firing is kept in the hub (``crawlfleet:alerts:notified``, written
after each delivery, with a digest of the webhook's URL): a restarted dashboard with the same
webhook starts from it, so an alert still firing is not sent
again and one that resolved while the dashboard was down is sent ``resolved``. An event queued
but not delivered when the dashboard stopped is sent again after the restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import redis
from starlette.concurrency import run_in_threadpool

from crawlfleet.alerts.rules import Alert, AlertState
from crawlfleet.alerts.store import current_alerts, load_notified, save_notified, webhook_id
from crawlfleet.hub.urls import mask_url
from crawlfleet.service.runtime import every
from crawlfleet.views.bloom import DupefilterCache
from crawlfleet.views.cluster import cluster_snapshot
from crawlfleet.views.hub import hub_snapshot

log = logging.getLogger("crawlfleet.dashboard")

PAYLOAD_VERSION = 1
TIMEOUT = 5.0  # seconds per attempt
ATTEMPTS = 5
BACKOFF = 1.0  # seconds before the first retry, doubled up to MAX_BACKOFF
MAX_BACKOFF = 30.0
QUEUE_LIMIT = 1000
# Redis down, or a record the rules cannot read: the loop must outlive any one evaluation.
ERRORS = (redis.RedisError, OSError, ValueError, TypeError, KeyError)


class Notifier:
    """Turns successive alert lists into ``firing``/``resolved`` events and POSTs them;
    with ``client``, remembers in the hub what the receiver was told (see the module)."""

    def __init__(
        self,
        url: str,
        *,
        client: redis.Redis | None = None,
        timeout: float = TIMEOUT,
        attempts: int = ATTEMPTS,
        backoff: float = BACKOFF,
    ) -> None:
        self.url = url
        self.where = mask_url(url)
        self.client = client
        self.timeout, self.attempts, self.backoff = timeout, attempts, backoff
        # alert key -> the alert's JSON: as of the last events queued, and as delivered
        self.active: dict[str, dict[str, Any]] = {}
        self.told: dict[str, dict[str, Any]] = {}
        self.loaded = client is None
        self.store_error: str | None = None
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_LIMIT)
        self.delivered = 0
        self.dropped = 0

    def load(self) -> None:
        """Start from what the receiver was told before a restart (runs in a worker thread).
        A hub that does not answer raises ``redis.RedisError`` (the caller tries again next
        round); one that refuses the key (an ACL from before it existed) is said once, and the
        notifier goes on in memory."""
        assert self.client is not None
        try:
            self.told = load_notified(self.client, webhook_id(self.url))
        except redis.ResponseError as exc:
            self._store_failed(exc)
        self.active = dict(self.told)
        self.loaded = True

    def update(self, alerts: Sequence[Alert], now: float) -> None:
        """Queue an event for each alert that started firing or resolved since the last call."""
        current = {a.key: a.to_json() for a in alerts}
        for key, alert in current.items():
            if key not in self.active:
                self._put(_event("firing", alert, now))
        for key, alert in self.active.items():
            if key not in current:
                self._put(_event("resolved", alert, now))
        self.active = current

    def _told(self, event: dict[str, Any]) -> None:
        """The receiver got ``event``: remember it in the hub (runs in a worker thread)."""
        alert = event["alert"]
        if event["status"] == "firing":
            self.told[alert["key"]] = alert
        else:
            self.told.pop(alert["key"], None)
        if self.client is None:
            return
        try:
            save_notified(self.client, webhook_id(self.url), self.told)
            self.store_error = None
        except redis.RedisError as exc:
            self._store_failed(exc)

    def _store_failed(self, exc: Exception) -> None:
        if self.store_error is None:
            log.warning(
                "alert webhook %s: cannot keep what was sent in the hub (%s); a restart may "
                "repeat or miss a notification",
                self.where,
                exc,
            )
        self.store_error = str(exc)

    def _put(self, event: dict[str, Any]) -> None:
        if self.queue.full():
            self.queue.get_nowait()
            self.dropped += 1
            log.warning("alert webhook %s: queue full, oldest event dropped", self.where)
        self.queue.put_nowait(event)

    async def run(self) -> None:
        """Forever (until cancelled): deliver the queued events one by one, in order."""
        async with httpx.AsyncClient(timeout=self.timeout, trust_env=False) as http:
            while True:
                event = await self.queue.get()
                if await self.deliver(http, event):
                    self.delivered += 1
                    await run_in_threadpool(self._told, event)
                else:
                    self.dropped += 1

    async def deliver(self, http: httpx.AsyncClient, event: dict[str, Any]) -> bool:
        """POST ``event``; retried on errors, timeouts, 5xx, 408 and 429; False when given up."""
        what = f"{event['status']} {event['alert']['key']}"
        problem = ""
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(min(MAX_BACKOFF, self.backoff * 2 ** (attempt - 1)))
            try:
                response = await http.post(self.url, json=event)
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}".replace(self.url, self.where)
                continue
            if response.status_code < 300:
                return True
            problem = f"HTTP {response.status_code}"
            if response.status_code < 500 and response.status_code not in (408, 429):
                break
        log.warning(
            "alert webhook %s: %s not delivered (%s)",
            self.where,
            what,
            problem,
            extra={"event": "alert"},
        )
        return False


def _event(status: str, alert: dict[str, Any], now: float) -> dict[str, Any]:
    return {
        "version": PAYLOAD_VERSION,
        "source": "crawlfleet dashboard",
        "status": status,
        "time": round(now, 3),
        "alert": alert,
    }


class Monitor:
    """The alert loop of one dashboard: evaluation, state in Redis, and the optional webhook."""

    def __init__(
        self,
        client: redis.Redis,
        redis_url: str,
        spiders: Callable[[], list[str]],
        interval: float,
        webhook: str = "",
    ) -> None:
        self.client, self.redis_url, self.spiders = client, redis_url, spiders
        self.interval = interval
        self.notifier = Notifier(webhook, client=client) if webhook else None
        self.dupes = DupefilterCache()
        self.state = AlertState()  # where Redis refuses the shared one
        self.alerts: list[Alert] = []
        self.error: str | None = None

    def evaluate(self) -> list[Alert]:
        """One evaluation (runs in a worker thread)."""
        names = self.spiders()
        if names:
            view = cluster_snapshot(self.client, self.redis_url, names, dupefilter_cache=self.dupes)
        else:  # no crawl yet: the hub's numbers only (memory, jobs)
            view = {
                "time": time.time(),
                "spiders": [],
                "hub": hub_snapshot(self.client, []),
            }
        return current_alerts(self.client, view, local=self.state)

    async def round(self) -> None:
        """Evaluate and notify; a Redis error is logged once per outage and changes nothing."""
        try:
            self.alerts = await run_in_threadpool(self.evaluate)
            self.error = None
        except ERRORS as exc:
            if self.error is None:
                log.warning(
                    "alerts: cannot evaluate: %s",
                    str(exc).replace(self.redis_url, mask_url(self.redis_url)),
                )
            self.error = str(exc)
            return
        if self.notifier is None:
            return
        if not self.notifier.loaded:
            try:
                await run_in_threadpool(self.notifier.load)
            except ERRORS:
                return  # the hub stopped answering: the next round loads it
        self.notifier.update(self.alerts, time.time())

    async def run(self) -> None:
        """Forever (until cancelled): evaluate every interval and deliver the notifications."""
        sender = asyncio.ensure_future(self.notifier.run()) if self.notifier else None
        try:
            await every(self.interval, self.round, asyncio.Event())
        finally:
            if sender is not None:
                sender.cancel()

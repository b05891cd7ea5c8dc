"""One rate budget per politeness key, shared by every worker of the cluster through the hub.

Each key (a target host, domain or IP — ``POLITENESS_KEY`` — or ``host@proxy`` when a proxy is
used) has a state hash in Redis (``SpiderKeys(namespace).politeness(key)``) that one Lua script
updates atomically per call. The budget is a GCRA token bucket: the key hands out *slots*, points
in time ``T = 1/rate`` apart, at most ``burst`` of them in the past after an idle spell. A worker
takes a lease of up to ``POLITENESS_LEASE_SIZE`` consecutive slots per round trip (none beyond
``POLITENESS_LEASE_HORIZON`` seconds ahead) and may send a request at a slot from its due time
until one interval later; a slot it misses is dropped, never saved up. So the cluster sends at
most ``ceil(rate * W) + burst`` requests to a key in any window of W seconds, whatever the lease
size, the number of workers or their clocks (a lease's times are relative to the hub's clock, and
the worker counts them from its own send and receive times). Unused slots are given back when
they are the last ones handed out (``release``); otherwise a worker that stops wanting a key
loses at most one lease, ``min(lease size, rate * horizon + 1)`` slots.

The same state learns the key's limit; nobody configures it. ``record(key, Outcome)`` counts
clean responses and their response times locally (sent with the next lease: no extra round trip)
and reports a ban at once. Every ``POLITENESS_WINDOW`` seconds the lease script judges the
window that ended (``lua/lease.lua``):

* **slow start** — a clean window that carried at least half its budget multiplies the rate by
  ``POLITENESS_GROWTH``, from ``POLITENESS_RATE``, while the key has met no ban;
* **back-off** — a ban (a ``POLITENESS_BAN_STATUSES`` status, a ``POLITENESS_BAN_MARKERS`` body,
  ``Retry-After``) makes the rate that drew it the key's ceiling and falls back below it: to the
  last rate that carried a clean window, or by ``POLITENESS_BACKOFF`` when none is known below
  (once per two horizons: the responses already under way are the same ban); no slot before
  ``Retry-After``, and a proxied key without one rests ``POLITENESS_COOLDOWN`` seconds, that
  (proxy, site) pair only. A target that slows down before it bans — a window's mean response
  time ``POLITENESS_LATENCY_FACTOR`` times the key's own baseline and 250 ms above it, timeouts
  counted at the download timeout — is backed off the same way, without a rest;
* **search** — while the last clean rate lies more than ``POLITENESS_PRECISION`` below the
  ceiling, the next window tries halfway between (after the rest);
* **hold and probe** — within that precision the key holds the clean rate and, every probe gap
  (``POLITENESS_PROBE_INTERVAL``, doubled by each ban near the ceiling up to 16 times, halved by
  each clean probe), tries ``POLITENESS_PROBE`` above it: additive increase, multiplicative
  decrease. A clean window at or above the ceiling forgets it (the site raised its limit) and the
  key grows again, a quarter as fast.

``POLITENESS_MAX_RATE`` (none by default) caps every key, and robots.txt's Crawl-delay caps a
key's rate (``set_crawl_delay``). The state — what was learned, when and how — stays on the hub
for ``POLITENESS_MEMORY`` seconds after the key's last use, so the next crawl of the site starts
from it; at most ``POLITENESS_MAX_KEYS`` keys per namespace are kept (the least recently used
go first). When the hub does not answer, the worker gets no slots and asks again after a growing
pause; when it answers again the bucket gives at most ``burst``.

The clock of the scripts is Redis's ``TIME``; tests pass ``clock`` (seconds), used both as the
scripts' clock and as the worker's, so they never sleep.
"""

from __future__ import annotations

import email.utils
import functools
import logging
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis

from crawlfleet.hub.clock import NOW_MS, hub_ms
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.hub.lua import read_lua
from crawlfleet.politeness import learning
from crawlfleet.politeness.config import Limits, PolitenessConfig

logger = logging.getLogger(__name__)

# The hub did not answer: ask again after this pause, doubled up to the maximum.
HUB_RETRY_MIN, HUB_RETRY_MAX = 0.1, 5.0
# The shortest wait ``acquire`` reports when it took no slot.
MIN_WAIT = 0.001
# A window's mean response time must also be this much (ms) above the key's baseline to count
# as the target slowing down (a fast site's jitter is no signal).
SLOW_MS = 250.0


def _lua(name: str) -> str:
    return read_lua("crawlfleet.politeness", name)


def _script(body: str) -> str:
    return "\n".join((NOW_MS, _lua("state.lua"), _lua(body)))


LEASE = _script("lease.lua")
BAN = _script("ban.lua")
RELEASE = _script("release.lua")


@functools.cache
def _registered_domain() -> Callable[[str], str]:
    """The registered domain of a host, from tldextract's bundled public-suffix list (imported
    here: only ``POLITENESS_KEY = domain`` needs it; never fetched over the network)."""
    import tldextract

    extract = tldextract.TLDExtract(suffix_list_urls=())

    def domain(host: str) -> str:
        return extract(host).top_domain_under_public_suffix or host

    return domain


@functools.lru_cache(maxsize=4096)
def _address(host: str) -> str:
    try:
        return str(socket.getaddrinfo(host, None)[0][4][0])
    except OSError:
        return host  # unresolvable: the download will fail; pace it by its name


def site_key(url: str, kind: str) -> str:
    """The site part of a politeness key: the URL's host, registered domain or IP address."""
    host = (urlsplit(url).hostname or "").lower() if "/" in url else url.lower()
    if kind == "domain":
        return _registered_domain()(host)
    if kind == "ip":
        return _address(host)
    return host


@dataclass(frozen=True)
class Outcome:
    """What a response says about the pace: a ban signal, the site's Retry-After (s), and how
    long the response took (s; None: unknown)."""

    ban: bool
    retry_after: float = 0.0
    latency: float | None = None


def retry_after_seconds(value: str | bytes | None, now: float | None = None) -> float:
    """``Retry-After`` in seconds (a number, or an HTTP date); 0 when absent or unreadable."""
    if not value:
        return 0.0
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if text.isdigit():
        return float(min(int(text), 86400))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return 0.0
    if when is None or when.tzinfo is None:
        return 0.0
    wait = when.timestamp() - (time.time() if now is None else now)
    return min(max(wait, 0.0), 86400.0)


def classify(
    config: PolitenessConfig,
    status: int,
    body: bytes = b"",
    retry_after: str | bytes | None = None,
    latency: float | None = None,
) -> Outcome:
    """A ban is a status in ``POLITENESS_BAN_STATUSES`` or a body holding a ban marker."""
    ban = status in config.ban_statuses or any(m in body for m in config.ban_markers)
    return Outcome(ban, retry_after_seconds(retry_after) if ban else 0.0, latency)


@dataclass
class _Lease:
    """Slots of one key this worker holds, on its own clock.

    Slot j is at ``first + j·T`` on the hub's clock (``first`` may be in the past: a burst). It is
    due from the receive time on and its window closes one interval after it, counted from the
    send time, so it is never used before its hub time nor later than one interval after it.
    """

    sent: float
    received: float
    first: float  # seconds from the hub's "now" to slot 0
    interval: float  # T, seconds
    count: int
    next: int  # first slot not yet used or dropped
    end_ms: float  # the key's tat after this lease (hub clock), for release
    start_ms: float  # slot 0 on the hub clock

    def due(self, j: int) -> float:
        return self.received + max(self.first + j * self.interval, 0.0)

    def until(self, j: int) -> float:
        return self.sent + max(self.first + j * self.interval, 0.0) + self.interval


@dataclass(frozen=True)
class KeyState:
    """One key as the hub holds it (for status, the dashboard and tests)."""

    rate: float
    cap: float
    cooldown: float  # seconds left
    bans: int
    next_slot: float  # seconds from now to the key's next free slot (may be negative)
    good: float = 0.0  # the highest rate that carried a clean window (0: none known)
    ceiling: float = 0.0  # the rate of the last ban or slow-down (0: none seen)
    phase: str = "growing"
    why: str = "start"


class Budget:
    """A worker's view of the cluster's politeness budgets (one per process)."""

    def __init__(
        self,
        client: redis.Redis,
        config: PolitenessConfig,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self.config = config
        # on a Redis Cluster every key of the namespace carries its hash tag: one slot
        self.keys = SpiderKeys.for_client(config.namespace, client)
        self._injected = clock is not None
        self.clock: Callable[[], float] = clock or time.monotonic
        self._lease = client.register_script(LEASE)
        self._ban = client.register_script(BAN)
        self._release = client.register_script(RELEASE)
        self._leases: dict[str, _Lease] = {}
        # no slot held: when to ask the hub again, and when the key's next slot is
        self._ask_at: dict[str, float] = {}
        self._next_at: dict[str, float] = {}
        self._oks: dict[str, int] = {}
        # response times counted since the key's last lease: (sum in ms, how many)
        self._lat: dict[str, tuple[float, int]] = {}
        self._hub_retry = 0.0
        # the end of the window of the slot ``acquire`` took last (this budget's clock)
        self.taken_until = 0.0
        self.stats = {"leases": 0, "granted": 0, "used": 0, "dropped": 0, "hub_errors": 0}

    # -- keys

    def key_for(self, url: str, proxy: str | None = None) -> str:
        """The politeness key of a request to ``url`` (through ``proxy``: ``site@proxy``)."""
        site = site_key(url, self.config.key_kind)
        return f"{site}@{proxy}" if proxy else site

    @staticmethod
    def site_of(key: str) -> str:
        return key.partition("@")[0]

    def _args(self, key: str) -> list[str | float | int]:
        limits: Limits = self.config.limits_for(self.site_of(key))
        now = repr(self.clock() * 1000) if self._injected else ""
        cap = limits.max_rate if math.isfinite(limits.max_rate) else 0
        memory = round(self.config.memory * 1000)
        return [now, limits.rate, limits.min_rate, cap, limits.burst, memory]

    def _names(self, key: str) -> list[str]:
        return [self.keys.politeness(key), self.keys.politeness_index]

    def _lease_names(self, key: str) -> list[str]:
        return [*self._names(key), self.keys.politeness_history]

    # -- slots

    def acquire(self, key: str, want: int = 0) -> float:
        """Take a slot of ``key`` now (0.0), or say in how many seconds one may be due (> 0).

        ``want``: how many requests for the key are waiting (the lease's size; at most
        ``POLITENESS_LEASE_SIZE``, which is also the default). At most one round trip, and only
        when the worker holds no slot of the key.
        """
        now = self.clock()
        wait = self._take(key, now)
        if wait is not None:
            return wait
        if self._ask_at.get(key, now) > now:
            return max(self._next_at.get(key, now) - now, self._ask_at[key] - now)
        self.lease(key, want or self.config.lease_size)
        wait = self._take(key, self.clock())
        if wait is not None:
            return wait
        # no slot: a wait > 0 (0.0 always means a slot was taken)
        return max(self.next_allowed(key) - self.clock(), MIN_WAIT)

    def _take(self, key: str, now: float) -> float | None:
        """0.0 and a slot used, seconds until the next held slot, or None: no slot held."""
        lease = self._leases.get(key)
        if lease is None:
            return None
        self._drop_missed(lease, now)
        if lease.next >= lease.count:
            del self._leases[key]
            return None
        due = lease.due(lease.next)
        if due > now:
            return due - now
        self.taken_until = lease.until(lease.next)
        lease.next += 1
        self.stats["used"] += 1
        return 0.0

    def _drop_missed(self, lease: _Lease, now: float) -> None:
        """Drop the slots whose window has passed: a missed slot is never saved up."""
        while lease.next < lease.count and lease.until(lease.next) <= now:
            lease.next += 1
            self.stats["dropped"] += 1

    def next_allowed(self, key: str) -> float:
        """When (this worker's clock) ``key`` may next be hit: a held slot's due time, the time
        to ask the hub again, or now when nothing is known (the scheduler serves keys by it)."""
        now = self.clock()
        lease = self._leases.get(key)
        if lease is not None:
            self._drop_missed(lease, now)
            if lease.next < lease.count:
                return lease.due(lease.next)
            del self._leases[key]
        return max(self._next_at.get(key, now), self._ask_at.get(key, now), now)

    def lease(self, key: str, want: int) -> int:
        """Ask the hub for up to ``want`` slots of ``key`` (one round trip); the number granted.

        Clean responses counted since the last lease of the key travel with it.
        """
        want = max(1, min(want, self.config.lease_size))
        oks = self._oks.pop(key, 0)
        lat, latn = self._lat.pop(key, (0.0, 0))
        c = self.config
        args = [
            *self._args(key),
            want,
            c.lease_horizon * 1000,
            oks,
            c.window * 1000,
            c.growth,
            c.probe,
            c.precision,
            round(lat, 3),
            latn,
            c.latency_factor,
            SLOW_MS,
            c.max_keys,
            c.backoff,
            c.probe_interval * 1000,
        ]
        sent = self.clock()
        try:
            reply = self._lease(keys=self._lease_names(key), args=args)
        except redis.RedisError as exc:
            self._oks[key] = self._oks.get(key, 0) + oks
            self._lat[key] = (lat, latn)
            self._hub_down(key, sent, exc)
            return 0
        received = self.clock()
        self._hub_retry = 0.0
        granted, first, interval, ask, _rate, hub_now = (float(v) for v in reply)
        self.stats["leases"] += 1
        self.stats["granted"] += int(granted)
        if granted <= 0:
            self._leases.pop(key, None)
            self._ask_at[key] = received + max(ask, 0.0) / 1000
            self._next_at[key] = received + max(first, 0.0) / 1000
            return 0
        self._ask_at.pop(key, None)
        self._next_at.pop(key, None)
        step = interval / 1000
        self._leases[key] = _Lease(
            sent=sent,
            received=received,
            first=first / 1000,
            interval=step,
            count=int(granted),
            next=0,
            end_ms=hub_now + ask,
            start_ms=hub_now + first,
        )
        return int(granted)

    def _hub_down(self, key: str, now: float, exc: Exception) -> None:
        if self._hub_retry == 0.0:
            logger.warning("politeness: the hub does not answer (%s); pausing %s", exc, key)
        self.stats["hub_errors"] += 1
        self._hub_retry = min(max(self._hub_retry * 2, HUB_RETRY_MIN), HUB_RETRY_MAX)
        self._leases.pop(key, None)
        for other in (*self._ask_at, key):
            self._ask_at[other] = max(self._ask_at.get(other, 0.0), now + self._hub_retry)
            self._next_at[other] = max(self._next_at.get(other, 0.0), self._ask_at[other])

    def release(self, key: str) -> int:
        """Give the unused slots of this worker's lease of ``key`` back; how many were taken back
        (0 when a later lease follows them: they are lost, at most one lease)."""
        lease = self._leases.pop(key, None)
        if lease is None or lease.next >= lease.count:
            return 0
        unused = lease.count - lease.next
        first = lease.start_ms + lease.next * lease.interval * 1000
        try:
            back = self._release(
                keys=self._names(key), args=[*self._args(key), lease.end_ms, first]
            )
        except redis.RedisError:
            return 0
        return unused if int(back) else 0

    def release_all(self) -> int:
        """Give back every lease this worker holds (when it stops); how many slots came back."""
        return sum(self.release(key) for key in list(self._leases))

    # -- adaptation

    def record(self, key: str, outcome: Outcome) -> None:
        """A response's outcome: clean ones are counted here and sent with the next lease; a ban
        goes to the hub now and drops this worker's slots of the key."""
        if not outcome.ban:
            if outcome.latency is not None:
                self.record_latency(key, outcome.latency)
            self._oks[key] = self._oks.get(key, 0) + 1
            return
        self._leases.pop(key, None)
        self._oks.pop(key, None)
        self._lat.pop(key, None)
        proxied = "@" in key
        c = self.config
        args = [
            *self._args(key),
            c.backoff,
            c.lease_horizon * 2000,
            outcome.retry_after * 1000,
            c.cooldown * 1000 if proxied else 0,
            c.precision,
            c.probe_interval * 1000,
            c.window * 1000,
        ]
        now = self.clock()
        try:
            names = [*self._names(key), self.keys.politeness_bans, self.keys.politeness_history]
            _rate, cool = (float(v) for v in self._ban(keys=names, args=args))
        except redis.RedisError as exc:
            self._hub_down(key, now, exc)
            return
        self._next_at[key] = self._ask_at[key] = max(
            self._ask_at.get(key, now), now + max(outcome.retry_after, cool / 1000)
        )

    def record_latency(self, key: str, seconds: float) -> None:
        """A response time of ``key`` (a timeout counts at the download timeout), sent with the
        next lease: the key's window compares their mean with its baseline."""
        if not math.isfinite(seconds) or seconds < 0:
            return
        total, count = self._lat.get(key, (0.0, 0))
        self._lat[key] = (total + seconds * 1000, count + 1)

    def set_crawl_delay(self, key: str, seconds: float | None) -> None:
        """robots.txt's Crawl-delay for ``key``: its rate never above 1/seconds (None: no cap)."""
        if seconds is not None and (not math.isfinite(seconds) or seconds < 0):
            raise ValueError(f"Crawl-delay must be a number of seconds >= 0, got {seconds!r}")
        cap = 1 / seconds if seconds else 0
        name = self.keys.politeness(key)
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(name, "cap", repr(float(cap)))
        pipe.pexpire(name, round(self.config.memory * 1000))
        pipe.execute()

    def state(self, key: str) -> KeyState:
        """The key's state on the hub (one round trip), on this budget's clock."""
        found = self.client.hgetall(self.keys.politeness(key))
        raw = learning.decode(key, {text(k): text(v) for k, v in found.items()})
        now_ms = self.clock() * 1000 if self._injected else hub_ms(self.client)
        limits = self.config.limits_for(self.site_of(key))
        return KeyState(
            rate=raw.get("rate") or limits.rate,
            cap=raw.get("cap", 0.0),
            cooldown=max(raw.get("cool", 0.0) - now_ms, 0.0) / 1000,
            bans=int(raw.get("bans", 0)),
            next_slot=(raw.get("tat", 0.0) - now_ms) / 1000,
            good=raw.get("good", 0.0),
            ceiling=raw.get("bad", 0.0),
            phase=learning.phase(raw, now_ms),
            why=learning.why(raw),
        )

    def cooldown(self, site: str, proxy: str) -> float:
        """Seconds the (proxy, site) pair still rests after a ban (0: it may serve the site)."""
        return self.state(f"{site}@{proxy}").cooldown


def text(value: bytes | str) -> str:
    """A Redis reply as text (undecodable bytes replaced)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

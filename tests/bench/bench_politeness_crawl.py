"""Politeness crawl benchmark (issue 16): real `scrapy crawl book` workers against a site that
limits and bans each client address, with the cluster-wide budget off ("before") and on.

Uses the book tests' lab (tests/integration/book/book_lab.py), every part a real process on
loopback. Two setups, each crawled with ``POLITENESS_ENABLED=False`` and ``=True`` side by side:

* Through proxies: the demo site at ``--rate-limit 20 --ban-seconds 10`` (20 API requests per
  second per client address, the 21st bans it for 10 s), three forward proxies leaving from
  127.0.0.2/.3/.4, both pools, the chapter's settings (``CONCURRENT_REQUESTS=10``,
  ``RETRY_HTTP_CODES`` with 401 and 403, no ``DOWNLOAD_DELAY``), 1, 2 and 3 worker processes.
  The proxy-bound limit is 3 * 20 = 60 API requests/s. The book spider asks the API for one
  detail page per book and one list page per 18 books (logins come from the account pool on
  127.0.0.1, not through the proxies), so the limit in books/s is 60 * N / (N + ⌈N / 18⌉).
* No proxies: two workers, ``PROXYPOOL_URL`` empty, against a site at ``--rate-limit 5``.

The crawls are time-bounded: each ends when every book is stored, when its workers stop by
themselves, or ``cap`` seconds (25) after the site's first API request of the crawl (SIGTERM,
then SIGKILL after 10 s; Scrapy's start-up is not counted); the figures are rates, not
completion times. Every count is exact: the site's access log (one millisecond-stamped line
per answer, with the client address it saw; tests/support/accesslog.py) gives the API requests,
their statuses (403 is the site's ban) and the largest number in any one-second window; the
items stream gives the books stored and their duplicates. Books/s is the
distinct books stored over the time from the site's first API request of the crawl to its last
stored item (a complete crawl) or to the stop. ``BENCH_POLITENESS_SETTINGS`` (``NAME=VALUE``
separated by blanks, e.g. ``POLITENESS_RATE=10``) adds settings to the "on" mode only.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import httpx
import redis
from benchrow import Section
from book_lab import ACCOUNT_KEY, PROXY_KEY, Lab, read_stats
from support.accesslog import Hit, hits, most_in_window
from support.waiting import wait_until

from bookcrawler.spiders.book import PAGE_SIZE

row = Section("politeness crawl (issue 16)").row

SITE_RATE, BAN_SECONDS, LONE_RATE = 20, 10, 5
SOURCES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
WARMUP = 5.0  # seconds after the first API request that the no-proxy windows leave out
IDLE_BEFORE_CLOSE = 2
OFF_CAP = 25.0  # seconds a crawl with politeness off runs (it is banned within seconds)
START_TIMEOUT = 90.0  # seconds from the launch to the first API request (Scrapy's start-up)
# The chapter's settings (issue 16): no delay, 10 in flight, bans and token rejections retried.
CHAPTER = (
    "CONCURRENT_REQUESTS=10",
    "DOWNLOAD_DELAY=0",
    "RETRY_HTTP_CODES=500,502,503,504,522,524,408,429,401,403",
    f"SCHEDULER_IDLE_BEFORE_CLOSE={IDLE_BEFORE_CLOSE}",
)
MODES = {"off": ("POLITENESS_ENABLED=False",), "on": ("POLITENESS_ENABLED=True",)}
ON_EXTRA_ENV = "BENCH_POLITENESS_SETTINGS"


@dataclass(frozen=True)
class Crawl:
    """What one time-bounded crawl did, from the site's log and the items stream."""

    site: list[Hit]  # every answer of the site during the crawl
    started: float  # its first answer to an /api/book request (epoch seconds)
    ended: float  # the last stored item of a complete crawl, else the stop
    how: str
    stored: int  # distinct books
    once: int  # books stored exactly once
    duplicates: int
    gave_up: str  # requests the workers gave up on (retry/max_reached), when all wrote stats

    @property
    def api(self) -> list[Hit]:
        """The answers to the catalogue API (list and detail pages)."""
        return [h for h in self.site if _is_api(h)]

    @property
    def seconds(self) -> float:
        return max(self.ended - self.started, 1e-3)

    def banned(self) -> int:
        return sum(h.status == 403 for h in self.api)


def _is_api(hit: Hit) -> bool:
    return hit.path.startswith("/api/book")


def mode_settings(mode: str) -> tuple[str, ...]:
    extra = os.environ.get(ON_EXTRA_ENV, "").split() if mode == "on" else []
    return (*CHAPTER, *MODES[mode], *extra)


def _ready(url: str, key: str, accept: Any) -> bool:
    try:
        resp = httpx.get(url, headers={"X-API-Key": key}, timeout=2.0, trust_env=False)
    except httpx.HTTPError:
        return False
    return resp.status_code == 200 and bool(accept(resp))


def reset(lab: Lab, keep_learned: bool = False) -> None:
    """A clean start: no crawl state on the hub (``keep_learned``: but what the politeness keys
    learned), no bans on the site, every proxy back at 100."""
    client = redis.Redis.from_url(lab.redis_url)
    keys = [
        k
        for k in client.scan_iter("book:*")
        if not (keep_learned and k.startswith(b"book:politeness:"))
    ]
    if keys:
        client.delete(*keys)
    client.close()
    lab.admin_delete("/api/admin/stats")
    proxypool = lab.worker_env["PROXYPOOL_URL"]
    if proxypool:
        wait_until(
            lambda: _ready(
                f"{proxypool}/all?format=json",
                PROXY_KEY,
                lambda r: (
                    len(r.json()) == len(lab.proxies) and all(p["score"] == 100 for p in r.json())
                ),
            ),
            "every proxy back in the pool at score 100",
            timeout=90,
            interval=0.5,
        )
    accountpool = lab.worker_env["ACCOUNTPOOL_URL"]
    wait_until(
        lambda: _ready(f"{accountpool}/demosite/random", ACCOUNT_KEY, lambda r: r.text.strip()),
        "a token in the account pool",
        timeout=60,
        interval=0.5,
    )


def _stop(procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Wait ``timeout`` for the workers to exit after one SIGTERM each (a second would make
    Scrapy skip its close and the stats file); kill what is left."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def crawl(
    lab: Lab,
    name: str,
    workers: int,
    settings: tuple[str, ...],
    books: int,
    cap: float,
    keep_learned: bool = False,
    during: Callable[[float], None] | None = None,
) -> Crawl:
    """One time-bounded crawl of ``books`` by ``workers`` processes from a clean start
    (``keep_learned``: the politeness keys keep what an earlier crawl learned). ``during`` is
    called while it runs with the seconds since the site's first API request."""
    reset(lab, keep_learned)
    site_log = lab.tmp / "demosite.log"
    offset = site_log.stat().st_size
    client = redis.Redis.from_url(lab.redis_url)
    launched = time.monotonic()
    started = [lab.start_worker(f"{name}-{i}", lab.worker_env, *settings) for i in range(workers)]
    procs = [proc for proc, _ in started]
    first: float | None = None  # the site's first API answer: the cap counts from there
    how = ""
    while not how:
        if first is None:
            first = next((h.time for h in hits(site_log, offset) if _is_api(h)), None)
        if client.xlen("book:items") >= books:
            how = "complete"
        elif all(proc.poll() is not None for proc in procs):
            how = "stopped by itself"
        elif first is not None and time.time() - first > cap:
            how = f"capped {cap:g} s after the first API request"
        elif first is None and time.monotonic() - launched > START_TIMEOUT:
            how = f"no API request within {START_TIMEOUT:g} s of the launch"
        else:
            if during is not None and first is not None:
                during(time.time() - first)
            time.sleep(0.2)  # bounded: the cap ends the loop
    stopped = time.time()
    if how == "complete":
        # they close by themselves once the frontier has been idle SCHEDULER_IDLE_BEFORE_CLOSE
        deadline = time.monotonic() + 30
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
    _stop(procs, timeout=10)
    entries = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange("book:items"))
    client.close()
    ids = Counter(fields[b"id"] for _, fields in entries)
    site = hits(site_log, offset)
    if how == "complete":
        ended = max(int(entry_id.split(b"-")[0]) for entry_id, _ in entries) / 1000
    else:
        ended = stopped
    stats = [read_stats(path) for _, path in started if path.exists()]
    gave_up = (
        str(sum(int(str(s.get("retry/max_reached", 0))) for s in stats))
        if len(stats) == workers
        else "n/a (a worker was killed at the stop, before writing its stats)"
    )
    return Crawl(
        site=site,
        started=min((h.time for h in site if _is_api(h)), default=ended),
        ended=ended,
        how=how,
        stored=len(ids),
        once=sum(n == 1 for n in ids.values()),
        duplicates=sum(n - 1 for n in ids.values()),
        gave_up=gave_up,
    )


def proxied(ctx: Any, books: int, cap: float, scenarios: tuple[int, ...]) -> list[dict[str, Any]]:
    workdir = ctx.workdir / "politeness-crawl-proxies"
    workdir.mkdir(parents=True, exist_ok=True)
    lab = Lab(workdir, ctx.start_redis().url)
    rows: list[dict[str, Any]] = []
    pages = math.ceil(books / PAGE_SIZE)
    limit = len(SOURCES) * SITE_RATE * books / (books + pages)
    try:
        lab.start_demosite(
            *("--rate-limit", str(SITE_RATE), "--ban-seconds", str(BAN_SECONDS)),
            *("--access-log", "--log-level", "info"),
            books=books,
        )
        lab.start_proxies(SOURCES)
        lab.crawl_env(lab.start_proxypool(), lab.start_accountpool("--no-tester"))
        for workers in scenarios:
            for mode in MODES:
                # "off" stalls under bans: its rate is known long before the books run out
                bound = cap if mode == "on" else min(cap, OFF_CAP)
                c = crawl(lab, f"pc-{workers}w-{mode}", workers, mode_settings(mode), books, bound)
                rate = c.stored / c.seconds
                peak = max(
                    (most_in_window([h.time for h in c.api if h.address == s]) for s in SOURCES),
                    default=0,
                )
                scenario = f"{workers} worker(s), politeness {mode}"
                rows += [
                    row(
                        scenario,
                        "books/s",
                        rate,
                        "books/s",
                        f"{c.stored} books in {c.seconds:.1f} s from the first API request "
                        f"({c.how})",
                    ),
                    row(
                        scenario,
                        "books/s ÷ proxy-bound limit",
                        rate / limit,
                        "ratio",
                        f"limit {limit:.1f} books/s = 3 proxies * {SITE_RATE} API requests/s * "
                        f"{books}/{books + pages} (a detail per book + a list page per "
                        f"{PAGE_SIZE}); target ≥ 0.9",
                    ),
                    row(
                        scenario,
                        "banned responses ÷ all responses",
                        c.banned() / max(len(c.api), 1),
                        "ratio",
                        f"{c.banned()} of {len(c.api)} API answers were 403 (site log); most in "
                        f"1 s through one proxy {peak} (sliding; the site's fixed windows allow "
                        f"{SITE_RATE}); target ≤ 0.01",
                    ),
                    row(
                        scenario,
                        "books stored exactly once",
                        c.once,
                        "books",
                        f"of {books}; {c.duplicates} duplicate items; requests given up "
                        f"(retry/max_reached): {c.gave_up}",
                    ),
                ]
    finally:
        lab.close()
    return rows


def lone(ctx: Any, books: int, cap: float) -> list[dict[str, Any]]:
    workdir = ctx.workdir / "politeness-crawl-lone"
    workdir.mkdir(parents=True, exist_ok=True)
    lab = Lab(workdir, ctx.start_redis().url)
    rows: list[dict[str, Any]] = []
    try:
        lab.start_demosite(
            *("--rate-limit", str(LONE_RATE), "--ban-seconds", str(BAN_SECONDS)),
            *("--access-log", "--log-level", "info"),
            books=books,
        )
        lab.crawl_env("", lab.start_accountpool("--no-tester"))
        for mode in MODES:
            # nothing about the site is configured: the key learns its 5/s
            c = crawl(lab, f"pc-lone-{mode}", 2, mode_settings(mode), books, cap)
            since = c.started + WARMUP
            window = max(c.ended - since, 1e-3)
            # every API request counts against the address, logins included (the site's rule)
            every = [h.time for h in c.site if h.path.startswith("/api/")]
            seen = [t for t in every if since <= t <= c.ended]
            served = sum(h.status == 200 and since <= h.time <= c.ended for h in c.api)
            scenario = f"2 workers, no proxies, site at {LONE_RATE}/s, politeness {mode}"
            rows += [
                row(
                    scenario,
                    "most requests in a 1 s window after warm-up",
                    most_in_window(seen),
                    "requests",
                    f"all API requests the site answered, logins included, {WARMUP:g} s after "
                    f"the first until the end ({c.how}); target ≤ {LONE_RATE}",
                ),
                row(
                    scenario,
                    "most requests in a 1 s window, whole crawl",
                    most_in_window(every),
                    "requests",
                    f"the same, warm-up included ({len(every)} API requests)",
                ),
                row(
                    scenario,
                    "crawl requests/s after warm-up",
                    served / window,
                    "requests/s",
                    f"{served} API answers 200 in {window:.1f} s; {c.banned()} of {len(c.api)} "
                    f"API answers banned (403); target ≥ {0.9 * LONE_RATE:g}",
                ),
            ]
    finally:
        lab.close()
    return rows


def run(ctx: Any) -> list[dict[str, Any]]:
    if ctx.quick:
        return proxied(ctx, books=300, cap=15, scenarios=(2,)) + lone(ctx, books=300, cap=15)
    return proxied(ctx, books=1000, cap=60, scenarios=(1, 2, 3)) + lone(ctx, books=300, cap=25)

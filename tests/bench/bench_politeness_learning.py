"""Politeness that learns (issue 32): real `scrapy crawl book` workers against a demo site whose
per-address limit nothing in the crawl is told, through three forward proxies.

Uses the politeness crawl bench's harness (bench_politeness_crawl.py: the book tests' lab, every
part a real process on loopback, the site's access log as the source of every count). Every crawl
has politeness on at its defaults and no rate of the site anywhere. Scenarios:

* the site at 20 requests/s per address (403 bans, 10 s), 1, 2 and 3 workers; at 5 and 50 with 2
  workers; at 20 answering 429 with Retry-After, 2 workers;
* a second crawl of the same site that keeps what the first learned (``book:politeness:*``);
* the limit changed mid-crawl, 20 → 10 → 30 (the site's admin API, at 60 s and 120 s).

Each crawl is capped ``cap`` seconds after the site's first API request. Rates are API requests
answered 200 through the proxies (the site's log, per second from its first API request), against
the proxy-bound limit (3 x the per-address limit); books/s follow them (one list page per 18
books). "Time to 0.9" is the end of the first 5-second span at 0.9 of the limit or more;
"after warm-up" the rate from then to the end. Bans are the site's ban answers over every API
answer of the crawl. The learned rate of each key is read from the hub at the end.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from bench_politeness_crawl import BAN_SECONDS, CHAPTER, SOURCES, Crawl, _is_api, crawl
from benchrow import Section
from book_lab import Lab

from crawlfleet.demosite.app import RateLimiter
from crawlfleet.demosite.config import BAN_PAGE_MARKER

row = Section("politeness that learns (issue 32)").row

SPAN = 5.0  # seconds of the spans "time to 0.9" looks at
SETTINGS = (*CHAPTER, "POLITENESS_ENABLED=True")


def served(c: Crawl, since: float, until: float, pages: frozenset[int] = frozenset()) -> int:
    """API answers 200 through the proxies between ``since`` and ``until`` (epoch seconds), but
    ``pages`` (the ``id`` of answers that were ban pages)."""
    return sum(
        1
        for h in c.site
        if _is_api(h)
        and h.status == 200
        and h.address in SOURCES
        and since <= h.time < until
        and id(h) not in pages
    )


def time_to(
    c: Crawl, level: float, start: float | None = None, pages: frozenset[int] = frozenset()
) -> float | None:
    """Seconds from ``start`` (the crawl's first API request) to the end of the first span of
    SPAN seconds whose served rate reached ``level``; None if none did."""
    t = c.started if start is None else start
    while t + SPAN <= c.ended:
        if served(c, t, t + SPAN, pages) / SPAN >= level:
            return t + SPAN - (c.started if start is None else start)
        t += 0.5
    return None


def banned(c: Crawl, pages: frozenset[int] = frozenset()) -> tuple[int, int]:
    """(ban answers, API answers) of the crawl: 403 and 429 answers, and ``pages``."""
    api = [h for h in c.site if _is_api(h)]
    return sum(h.status in (403, 429) or id(h) in pages for h in api), len(api)


def ban_pages(c: Crawl, limit: float) -> frozenset[int]:
    """The ``id`` of each answer that was a ban page, for a site whose bans answer 200 (its log
    cannot tell them): the demo site's own RateLimiter replayed over the log (fixed one-second
    windows per address, BAN_SECONDS bans). Logins count against an address too."""
    limiter = RateLimiter(int(limit), 1.0, BAN_SECONDS)
    found = set()
    for h in sorted((h for h in c.site if h.path.startswith("/api/")), key=lambda h: h.time):
        if limiter.banned_for(h.address, h.time) or limiter.hit(h.address, h.time):
            found.add(id(h))
    return frozenset(found)


def learned(lab: Lab) -> list[tuple[str, float, float]]:
    """(proxy, learned rate, ceiling) of each proxied key of the crawl, from the hub."""
    client = redis.Redis.from_url(lab.redis_url, decode_responses=True)
    found = []
    for name in client.scan_iter(match="book:politeness:key:*@*"):
        raw = client.hgetall(name)
        proxy = name.rsplit("@", 1)[-1]
        found.append((proxy, float(raw.get("good", 0)), float(raw.get("bad", 0))))
    client.close()
    return sorted(found)


def crawl_rows(
    lab: Lab, scenario: str, c: Crawl, limit: float, status: str = "403"
) -> list[dict[str, Any]]:
    allowed = limit * len(SOURCES)
    pages = ban_pages(c, limit) if status == "200" else frozenset()
    reached = time_to(c, 0.9 * allowed, pages=pages)
    after = c.started + reached if reached is not None else c.ended
    steady = served(c, after, c.ended, pages) / max(c.ended - after, 1e-3)
    bans, answers = banned(c, pages)
    keys = learned(lab)
    rows = [
        row(
            scenario,
            "time to 0.9 of the proxy-bound limit",
            reached if reached is not None else float("nan"),
            "s",
            f"first {SPAN:g} s span at {0.9 * allowed:g} requests/s or more ({c.how}); aim ≤ 60 s",
        ),
        row(
            scenario,
            "requests/s after warm-up ÷ proxy-bound limit",
            steady / allowed if reached is not None else 0.0,
            "ratio",
            f"{steady:.1f} API requests/s answered 200 through the proxies from then to the end, "
            f"limit {allowed:g} (3 proxies x {limit:g}/s); target ≥ 0.9",
        ),
        row(
            scenario,
            "banned responses ÷ all responses",
            bans / max(answers, 1),
            "ratio",
            f"{bans} of {answers} API answers were bans, whole crawl; target ≤ 0.01",
        ),
        row(
            scenario,
            "learned rate ÷ the site's limit (lowest key)",
            min((good for _, good, _ in keys), default=0.0) / limit,
            "ratio",
            "per key (proxy: learned / ceiling): "
            + ", ".join(f"{p.rsplit(':', 1)[-1]}: {g:.1f}/{b:.1f}" for p, g, b in keys)
            + f"; the site's limit {limit:g}/s",
        ),
        row(
            scenario,
            "books stored",
            c.stored,
            "books",
            f"{c.stored / max(c.seconds, 1e-3):.1f} books/s over the whole crawl, warm-up included",
        ),
    ]
    for r in rows:  # as they come: a long run cut short still shows its crawls
        print(f"  {r['scenario']} | {r['metric']}: {r['value']:.3g} {r['unit']} ({r['note']})")
    return rows


def site_lab(ctx: Any, name: str, limit: int, books: int, *flags: str) -> Lab:
    workdir = ctx.workdir / name
    workdir.mkdir(parents=True, exist_ok=True)
    lab = Lab(workdir, ctx.start_redis().url)
    lab.start_demosite(
        *("--rate-limit", str(limit), "--ban-seconds", str(BAN_SECONDS), *flags),
        *("--access-log", "--log-level", "info"),
        books=books,
    )
    lab.start_proxies(SOURCES)
    lab.crawl_env(lab.start_proxypool(), lab.start_accountpool("--no-tester"))
    return lab


def limits(ctx: Any, cap: float, books: int, scenarios: list[tuple[int, int, str]]) -> list:
    rows: list[dict[str, Any]] = []
    for limit, workers, status in scenarios:
        flags = ("--ban-status", status) if status != "403" else ()
        # a ban page (200) is told by its text: the marker is a ban signal, not a rate
        settings = (
            (*SETTINGS, f"POLITENESS_BAN_MARKERS={BAN_PAGE_MARKER}")
            if status == "200"
            else SETTINGS
        )
        lab = site_lab(ctx, f"learn-{limit}-{workers}-{status}", limit, books, *flags)
        try:
            what = {"403": "403 bans", "429": "429 with Retry-After", "200": "a 200 ban page"}
            scenario = f"site at {limit}/s per address ({what[status]}), {workers} worker(s)"
            c = crawl(lab, f"learn-{limit}-{workers}", workers, settings, books, cap)
            rows += crawl_rows(lab, scenario, c, limit, status)
            if (limit, workers, status) == scenarios[0]:
                # the same site again: the keys start from what they learned
                again = crawl(
                    lab, f"learn-{limit}-again", workers, settings, books, cap, keep_learned=True
                )
                rows += crawl_rows(lab, f"{scenario}, second crawl", again, limit, status)
        finally:
            lab.close()
    return rows


def changing(ctx: Any, cap: float, books: int) -> list[dict[str, Any]]:
    """20 → 10 at 60 s → 30 at 120 s: the time back to 0.9 of each new limit."""
    plan = [(60.0, 10), (120.0, 30)]
    lab = site_lab(ctx, "learn-changing", 20, books)
    done: list[tuple[float, int, float]] = []  # (seconds since the first request, limit, epoch)
    try:

        def during(elapsed: float) -> None:
            for at, limit in plan:
                if elapsed >= at and all(d[1] != limit for d in done):
                    lab.admin("/api/admin/config", {"rate_limit": limit})
                    done.append((elapsed, limit, time.time()))

        c = crawl(lab, "learn-changing", 2, SETTINGS, books, cap, during=during)
        rows = []
        for elapsed, limit, when in done:
            back = time_to(c, 0.9 * limit * len(SOURCES), start=when)
            rows.append(
                row(
                    "site at 20 → 10 → 30/s per address, 2 workers",
                    f"time back to 0.9 after the change to {limit}/s",
                    back if back is not None else float("nan"),
                    "s",
                    f"changed {elapsed:.0f} s into the crawl; first {SPAN:g} s span at "
                    f"{0.9 * limit * len(SOURCES):g} requests/s or more (nan: not within the "
                    f"crawl, {c.how})",
                )
            )
        bans, answers = banned(c)
        rows.append(
            row(
                "site at 20 → 10 → 30/s per address, 2 workers",
                "banned responses ÷ all responses",
                bans / max(answers, 1),
                "ratio",
                f"{bans} of {answers} API answers were bans, whole crawl; learned at the end "
                + ", ".join(f"{g:.1f}/{b:.1f}" for _, g, b in learned(lab)),
            )
        )
        return rows
    finally:
        lab.close()


def run(ctx: Any) -> list[dict[str, Any]]:
    if ctx.quick:
        return limits(ctx, cap=60, books=3000, scenarios=[(20, 2, "403")])
    return limits(
        ctx,
        cap=150,
        books=9000,
        scenarios=[
            (20, 2, "403"),
            (20, 1, "403"),
            (20, 3, "403"),
            (5, 2, "403"),
            (50, 2, "403"),
            (20, 2, "429"),
            (20, 2, "200"),
        ],
    ) + changing(ctx, cap=300, books=20000)

"""Polite crawls at cluster scale: two `scrapy crawl book` workers share one rate budget per
(site, proxy) pair on the hub, with no DOWNLOAD_DELAY and no rate of the site anywhere, against a
demo site that bans busy addresses: each pair learns the site's limit. Real processes on
loopback: redis-server, the demo site, forward proxies leaving from distinct loopback addresses,
both pools. Assertions are on counts (the site's own ban counter, the workers' stats, the
exported books, the rates the hub learned), never on timing; the rates are printed."""

from __future__ import annotations

import httpx
import redis
from book_lab import ACCOUNT_KEY, ACCOUNTS, CRAWL_SETTINGS, Lab, export, wait_items, wait_workers
from support.waiting import wait_until

from crawlfleet.demosite.catalogue import Catalogue
from crawlfleet.demosite.config import BAN_PAGE_MARKER
from crawlfleet.hub.clock import hub_ms
from crawlfleet.views.politeness import politeness_snapshot

# The chapter's settings: ten requests at a time, bans retried, no delay.
CHAPTER = (
    "CONCURRENT_REQUESTS=10",
    "DOWNLOAD_DELAY=0",
    "RETRY_HTTP_CODES=500,502,503,504,522,524,408,429,401,403",
)


def total(stats: list[dict[str, object]], name: str) -> int:
    return sum(int(str(s.get(name, 0))) for s in stats)


def stored_ms(entries: list[tuple[bytes, object]]) -> int:
    """When the first of ``entries`` (an XRANGE reply of book:items) was stored: the ms of its
    id (the hub's clock)."""
    return int(entries[0][0].split(b"-")[0])


def items_per_second(lab: Lab) -> float:
    """Books a second from the first to the last item the workers stored (stream ids are ms)."""
    client = redis.Redis.from_url(lab.redis_url)
    first, last = client.xrange("book:items", count=1), client.xrevrange("book:items", count=1)
    count = client.xlen("book:items")
    client.close()
    return (count - 1) / max((stored_ms(last) - stored_ms(first)) / 1000, 0.001)


def assert_every_book_once(lab: Lab, books: int) -> None:
    items, _ = export(lab.redis_url, lab.tmp / "books.jsonl")
    assert sorted(item["id"] for item in items) == sorted(Catalogue(books, seed=7).ids)


def all_tokens(pool_url: str) -> None:
    """Wait until the account pool holds a token per account: its logins are done (they count
    against the site's limit of this address)."""

    def count() -> int:
        resp = httpx.get(
            f"{pool_url}/demosite/count", headers={"X-API-Key": ACCOUNT_KEY}, trust_env=False
        )
        return int(resp.json()["count"])

    wait_until(lambda: count() >= len(ACCOUNTS), "a token per account", timeout=30)


def two_workers(lab: Lab, env: dict[str, str], *settings: str) -> list[dict[str, object]]:
    workers = [
        lab.start_worker(f"worker{i}", env, *CRAWL_SETTINGS, *CHAPTER, *settings) for i in (1, 2)
    ]
    stats = wait_workers(workers)
    assert all(int(str(s.get("response_received_count", 0))) > 0 for s in stats)  # both worked
    return stats


def learned(lab: Lab) -> dict[str, dict[str, float]]:
    """Each politeness key's learned state on the hub: key -> {good, bad, rate, bans}."""
    client = redis.Redis.from_url(lab.redis_url, decode_responses=True)
    found = {}
    for name in client.scan_iter(match="book:politeness:key:*"):
        raw = client.hgetall(name)
        key = name.removeprefix("book:politeness:key:")
        found[key] = {f: float(raw.get(f, 0)) for f in ("good", "bad", "rate", "bans")}
    client.close()
    return found


def held_rate(lab: Lab, key: str) -> float:
    """The rate ``key`` was held at for most of the crawl once it had met the site's limit: the
    time-weighted median of its rate history (the dashboard's chart) from its first ban to the
    last book stored. A single reading at the end can fall in the short dip after a late ban."""
    client = redis.Redis.from_url(lab.redis_url)
    end = stored_ms(client.xrevrange("book:items", count=1)) / 1000
    history = politeness_snapshot(client, "book", hub_ms(client))["history"][key]
    client.close()
    bans = [i for i, (_, _, why) in enumerate(history) if why == "ban"]
    assert bans, f"{key} never met the site's limit: {history}"
    steps = history[bans[0] :]
    spans = sorted(
        (rate, max(min(until, end) - at, 0.0))
        for (at, rate, _), (until, _, _) in zip(steps, [*steps[1:], [end, 0, ""]], strict=True)
    )
    half, held = sum(seconds for _, seconds in spans) / 2, 0.0
    for rate, seconds in spans:
        held += seconds
        if held >= half:
            return float(rate)
    raise AssertionError(f"{key}: no time held after its first ban: {history}")


def test_three_proxies_learn_the_sites_limit_of_20_per_second_each(lab: Lab) -> None:
    """Nothing says 20: each (site, proxy) pair starts at 1/s and learns it from the bans."""
    books = 2000
    lab.start_demosite("--rate-limit", "20", "--ban-seconds", "10", books=books)
    lab.start_proxies()
    env = lab.crawl_env(lab.start_proxypool(), lab.start_accountpool("--no-tester"))
    lab.admin_delete("/api/admin/stats")
    stats = two_workers(lab, env)
    assert_every_book_once(lab, books)
    site = lab.admin("/api/admin/stats")
    responses = total(stats, "response_received_count")
    banned = total(stats, "politeness/responses/banned")
    clients = site["book_requests"]
    assert isinstance(clients, dict) and set(clients) == {"127.0.0.2", "127.0.0.3", "127.0.0.4"}
    keys = {k: v for k, v in learned(lab).items() if "@" in k}
    assert len(keys) == 3, keys
    rates = sorted(round(v["good"], 2) for v in keys.values())
    held = sorted(held_rate(lab, key) for key in keys)
    rate = items_per_second(lab)
    print(
        f"\npoliteness, 3 proxies x 20/s, nothing configured: {books} books at {rate:.1f} books/s "
        f"({rate / 60:.2f} of the 60/s limit), {responses} responses, {banned} banned, "
        f"site bans {site['bans']}; learned {rates}, held {held}"
    )
    # each pair learned the limit: once it had met it, it held at least 0.8 of it most of the
    # time, never above what the site allowed clean
    assert all(16 <= rate <= 21 for rate in held), (held, keys)
    # the search costs a few bans per pair, each a handful of responses under way
    assert int(str(site["bans"])) <= 5 * 3, site
    assert banned <= 0.05 * responses, (banned, responses)
    # the frontier paced nearly every request; the middleware the few others (late ones)
    assert total(stats, "politeness/slots/scheduler") >= 0.8 * responses
    assert total(stats, "proxy/report/banned") == 0  # a site's ban is not the proxy's fault


def test_no_proxies_two_workers_learn_the_sites_limit(lab: Lab) -> None:
    books = 120
    lab.start_demosite("--rate-limit", "5", "--ban-seconds", "10", books=books)
    accountpool = lab.start_accountpool("--no-tester")
    env = lab.crawl_env("", accountpool)
    all_tokens(accountpool)
    lab.admin_delete("/api/admin/stats")  # the account pool's logins came from this address too
    stats = two_workers(lab, env)
    assert_every_book_once(lab, books)
    site = lab.admin("/api/admin/stats")
    ((key, state),) = learned(lab).items()
    held = held_rate(lab, key)
    pages = sum(int(v) for v in dict(site["book_requests"]).values())  # type: ignore[call-overload]
    print(
        f"\npoliteness, no proxies, site at 5/s: {pages} pages, "
        f"{items_per_second(lab):.2f} books/s, site bans {site['bans']}, learned {state}, "
        f"held {held}/s"
    )
    # the rate it held once it had met the limit: most of the time within 0.8 of the limit
    assert 4 <= held <= 5.5, (held, state)
    assert int(str(site["bans"])) <= 4, site
    assert total(stats, "politeness/responses/banned") <= 0.1 * pages


def test_a_ban_page_only_its_text_reveals_is_learned_from_and_retried(lab: Lab) -> None:
    """The site answers a banned address 200 with an "access denied" page: only the marker
    (POLITENESS_BAN_MARKERS, a ban signal, not a rate) tells it. The pages are retried, never
    parsed: every book once."""
    books = 400
    lab.start_demosite(
        *("--rate-limit", "20", "--ban-seconds", "10", "--ban-status", "200"), books=books
    )
    lab.start_proxies()
    env = lab.crawl_env(lab.start_proxypool(), lab.start_accountpool("--no-tester"))
    stats = two_workers(lab, env, f"POLITENESS_BAN_MARKERS={BAN_PAGE_MARKER}")
    assert_every_book_once(lab, books)
    pages = total(stats, "politeness/responses/ban_page")
    keys = {k: v for k, v in learned(lab).items() if "@" in k}
    print(f"\nban pages: {pages} retried; learned {sorted(v['good'] for v in keys.values())}")
    assert pages >= 1 and total(stats, "politeness/responses/banned") >= pages
    # the pages taught the keys their ceiling as a 403 would
    assert any(v["bad"] > 0 for v in keys.values()), keys
    assert all(0 < v["good"] <= 21 for v in keys.values()), keys


def test_a_sites_ban_cools_the_pair_down_and_spares_the_proxy(lab: Lab) -> None:
    books = 120
    lab.start_demosite("--rate-limit", "20", "--ban-seconds", "2", books=books)
    lab.start_proxies()
    env = lab.crawl_env(lab.start_proxypool(), lab.start_accountpool("--no-tester"))
    # a start far above the site's limit: the site bans, the pacer backs off and the pairs
    # rest as long as the site's Retry-After says
    stats = two_workers(lab, env, "POLITENESS_RATE=40")
    assert_every_book_once(lab, books)
    site = lab.admin("/api/admin/stats")
    assert int(str(site["bans"])) >= 1
    assert total(stats, "politeness/responses/banned") >= 1
    assert total(stats, "proxy/banned") >= 1
    assert total(stats, "proxy/retry/count") >= total(stats, "proxy/banned")
    # the site's word about one (proxy, site) pair: no proxy reported, none quarantined
    assert total(stats, "proxy/report/banned") == 0
    assert all("httperror/response_ignored_count" not in s for s in stats)


def test_a_killed_worker_loses_none_of_the_requests_it_was_pacing(lab: Lab) -> None:
    """SIGKILL while requests wait in the worker's buffer for their politeness slots: they are
    leased, so they come back to the queue and the other worker crawls them. (One site: the
    queue per site gives a look further nothing of the site the worker holds, so the buffer is
    what one pop of SCHEDULER_PREFETCH brings.)"""
    books = 60
    lab.start_demosite(books=books)
    env = lab.crawl_env("", lab.start_accountpool("--no-tester"))
    # a cap (the site has no limit): requests wait in the buffer for their slots
    paced = (
        "POLITENESS_MAX_RATE=10",
        "POLITENESS_LOOKAHEAD=40",
        "SCHEDULER_PREFETCH=40",
    )
    leases = ("SCHEDULER_LEASE_TIMEOUT=3", "SCHEDULER_HEARTBEAT_INTERVAL=0.5")
    settings = (*CRAWL_SETTINGS, *CHAPTER, *paced, *leases)
    victim, _ = lab.start_worker("victim", env, *settings)
    wait_items(lab.redis_url, 10)
    victim.kill()
    victim.wait()
    wait_workers([lab.start_worker("survivor", env, *settings)])
    assert_every_book_once(lab, books)
    # the victim's leases came back: reaped when the survivor joined (past their deadline) or
    # later by its heartbeat, both counted in the crawl's stats
    hub = redis.Redis.from_url(lab.redis_url)
    assert int(hub.hget("book:stats", "scheduler/requeued") or 0) >= 1


def test_a_bad_budget_setting_stops_the_worker_at_start_with_one_line(lab: Lab) -> None:
    env = lab.crawl_env("", "")  # no site, no pools: the check comes before any request
    proc, _ = lab.start_worker("bad", env, "POLITENESS_KEY=url")
    assert proc.wait(timeout=60) != 0
    log = (lab.tmp / "bad.log").read_text()
    assert (
        "Politeness cannot start: POLITENESS_KEY must be one of host, domain, ip, got 'url'" in log
    )

"""The settings of the cluster's politeness budget (``crawlfleet.politeness``)."""

from __future__ import annotations

from crawlfleet.settingtable.row import Setting

POLITENESS = (
    Setting(
        "POLITENESS_ENABLED",
        True,
        "switch the budget off",
    ),
    Setting(
        "POLITENESS_KEY",
        "host",
        (
            "what a key is: `host`, `domain` (the registered domain, from the bundled "
            "public-suffix list) or `ip` (the resolved address) — Nutch's `byHost`, `byDomain`, "
            "`byIP`. Through a proxy the key is `<site>@<proxy>`, so each egress address has its "
            "own budget"
        ),
    ),
    Setting(
        "POLITENESS_RATE",
        1.0,
        (
            "where a key that has learned nothing yet starts; a key the hub remembers starts from "
            "what it learned"
        ),
        shown="`1.0` (no higher than `POLITENESS_MAX_RATE`)",
    ),
    Setting(
        "POLITENESS_MIN_RATE",
        None,
        "the floor backoff never goes below",
        shown="`POLITENESS_RATE / 10`",
    ),
    Setting(
        "POLITENESS_MAX_RATE",
        None,
        (
            "an optional cap no key passes; none by default: each key's ceiling is what the site "
            "shows"
        ),
        shown="none (`0` or unset)",
    ),
    Setting(
        "POLITENESS_BURST",
        1,
        (
            "requests a key may take at once after an idle spell; in any window of W seconds the "
            "cluster sends a key at most ⌈rate × W⌉ + burst requests"
        ),
    ),
    Setting(
        "POLITENESS_SITES",
        {},
        (
            'optional per-site bounds: `{"host": rate}` or `{"host": {"rate": …, "min_rate": …, '
            '"max_rate": …, "burst": …}}` (each field optional: a start, a floor, a cap), a dict '
            "or its JSON text (as an inventory renders it into the environment); a site's start "
            "rate widens the default floor for that site"
        ),
    ),
    Setting(
        "POLITENESS_BAN_STATUSES",
        (403, 429, 503),
        "response statuses that are a ban signal (a list, or comma-separated)",
        shown="`403, 429, 503`",
    ),
    Setting(
        "POLITENESS_BAN_MARKERS",
        (),
        (
            "body substrings that are a ban signal (a list: a marker may hold a comma). A response"
            ' whose status is no ban status but whose body holds a marker — a 200 "access denied" '
            "page — is a ban page: the key learns from it as from a 403, and the request is "
            "retried as `RetryMiddleware` would (`RETRY_TIMES`, `dont_retry`, stats `retry/…`, "
            "`politeness/responses/ban_page`), never handed to the spider; past its retries it is "
            "given up as a failed download (`crawlfleet requeue-failed`)"
        ),
    ),
    Setting(
        "POLITENESS_BACKOFF",
        0.5,
        (
            "on a ban with no clean rate known below the one that drew it, the rate is multiplied "
            "by this (0 < x < 1); at most once per 2 × `POLITENESS_LEASE_HORIZON` (the other bans "
            "of one burst are answers to requests sent before the backoff), never below the floor;"
            " `Retry-After` (seconds or an HTTP date) holds the whole key that long (slots other "
            "workers already hold, at most `POLITENESS_LEASE_HORIZON` ahead, are still used)"
        ),
    ),
    Setting(
        "POLITENESS_GROWTH",
        2.0,
        (
            "slow start: a clean window (no ban, at least half its budget used) multiplies the "
            "rate of a key that has met no ban by this (1 < x ≤ 10); after a ceiling it had is "
            "passed clean, a quarter as much (`1 + (x − 1) / 4`)"
        ),
    ),
    Setting(
        "POLITENESS_PRECISION",
        0.1,
        (
            "the search for the limit ends when the last clean rate is within this fraction of the"
            " ceiling (the rate of the last ban): the key then holds at 0.9 of the limit or more"
        ),
    ),
    Setting(
        "POLITENESS_PROBE",
        0.05,
        (
            "once the limit is known, a probe tries this fraction above the last clean rate (0 < x"
            " < 1; additive increase)"
        ),
    ),
    Setting(
        "POLITENESS_PROBE_INTERVAL",
        120,
        (
            "seconds a key holds before such a probe; each ban near the ceiling doubles it (up to "
            "16 times), each clean probe halves it (not below this)"
        ),
    ),
    Setting(
        "POLITENESS_LATENCY_FACTOR",
        3.0,
        (
            "a window whose mean response time is this many times the key's baseline (its fast "
            "answers) and 250 ms above it counts as the target slowing down: backed off like a "
            "ban, without a rest. Timeouts count at the download timeout. `0`: off"
        ),
    ),
    Setting(
        "POLITENESS_WINDOW",
        2,
        "seconds of a learning window",
    ),
    Setting(
        "POLITENESS_COOLDOWN",
        20,
        (
            "seconds a (proxy, site) pair rests after a ban through that proxy that carried no "
            "`Retry-After` (with one, the pair rests as long as it says); the proxy keeps serving "
            "other sites and the pair comes back by itself"
        ),
    ),
    Setting(
        "POLITENESS_MEMORY",
        7 * 86400.0,
        (
            "seconds a key's learned state stays on the hub after its last use: the next crawl of "
            "the site starts from it"
        ),
        shown="`604800` (a week)",
    ),
    Setting(
        "POLITENESS_MAX_KEYS",
        100_000,
        (
            "keys kept per namespace; above it the least recently used go, state and all (a crawl "
            "over many sites stays bounded)"
        ),
    ),
    Setting(
        "POLITENESS_LEASE_SIZE",
        8,
        "slots a worker takes per round trip to the hub (one round trip per 8 requests)",
    ),
    Setting(
        "POLITENESS_LEASE_HORIZON",
        1.0,
        (
            "seconds ahead a lease may reach: bounds what one worker holds and how late a rate "
            "change reaches the others"
        ),
    ),
    Setting(
        "POLITENESS_GC_FREEZE",
        True,
        (
            "while a crawl runs, keep the objects alive at its start out of Python's garbage "
            "collector (`gc.freeze()` at `spider_opened`, after one collection; thawed when the "
            "process's last such crawl closes). A slot may be used for one interval only (55 ms at"
            " 18/s): unfrozen, each full collection stalled a worker 0.1–0.25 s every few seconds "
            "at 50 requests/s and the slots due meanwhile were dropped "
            "(`politeness/budget/dropped`)"
        ),
    ),
    Setting(
        "POLITENESS_LOOKAHEAD",
        None,
        (
            "the most requests the frontier scheduler buffers while looking for one whose key may "
            "be hit now (each stays leased to the worker)"
        ),
        shown="4 × `SCHEDULER_PREFETCH`",
    ),
    Setting(
        "POLITENESS_NAMESPACE",
        None,
        (
            "prefix of the budget keys in Redis (`<namespace>:politeness:…`, "
            "[keys](redis-keys.md)); spiders that share a namespace share their budgets; the "
            "workers record it in `<spider>:frontier` (`politeness_namespace`), where `crawlfleet "
            "status` and the dashboard read it"
        ),
        shown="the spider's name",
    ),
)

"""The politeness budget as operators see it: the most recently used state hashes of
``<namespace>:politeness:index`` and the recent bans (``<namespace>:politeness:bans``; the
namespace is the ``politeness_namespace`` of ``<spider>:frontier``, else the spider), each key's
phase, and which limit binds the crawl (:func:`bound_by`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import redis

from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.politeness import learning
from crawlfleet.views.values import decode_hash, rounded, text

# Keys read per crawl: the most recently used ones of the politeness index.
POLITENESS_KEYS = 50
# A key leased or banned within ACTIVE_WINDOW seconds is active; bans are counted over the last
# BAN_WINDOW seconds (the ban record keeps ten minutes).
ACTIVE_WINDOW = 60.0
BAN_WINDOW = 300.0
# A key is "full" when its clean responses per second reach NEAR_BUDGET of its budget; while
# its window is younger than OBSERVE_MIN seconds (no rate yet), when its next free slot lies
# less than max(one interval, SLOT_SLACK) seconds in the past (every slot up to now was taken).
# Slots alone do not say it: a worker that cannot keep up leases slots and drops them.
NEAR_BUDGET = 0.8
SLOT_SLACK = 0.5
OBSERVE_MIN = 1.0
# The hub binds when a PING takes HUB_SLOW_MS or more, or Redis uses HUB_BUSY_CPU of a core.
HUB_SLOW_MS = 20.0
HUB_BUSY_CPU = 0.9
# The rate history: entries read per crawl, keys charted (the most recently used), and how far
# back (s).
HISTORY_READ = 2000
HISTORY_KEYS = 8
HISTORY_SECONDS = 3600.0
# Garbage state hashes: at most this many warnings per crawl (the rest are counted).
MAX_WARNINGS = 5
# Key states that mean the site holds the key back.
SITE_BOUND = ("full", "cooling", "banned")
_NEVER = learning.NEVER


def politeness_key(
    key: str, raw: dict[str, str], now_ms: float, used_ms: float, recent_bans: int
) -> dict[str, Any]:
    """One key's row (``politeness.keys[]`` of ``status --json``) from its state hash at
    ``now_ms`` (the scripts' clock); :class:`BadKeyState` when a field is not a number."""
    f = learning.decode(key, raw)
    rate = f.get("rate", 0.0) if f.get("rate", 0.0) > 0 else None
    cap = f.get("cap", 0.0) if f.get("cap", 0.0) > 0 else None
    budget = min(r for r in (rate, cap) if r is not None) if rate or cap else None
    tat = f.get("tat", _NEVER)
    next_slot = (tat - now_ms) / 1000 if tat > _NEVER else None
    cooldown = max(f.get("cool", 0.0) - now_ms, 0.0) / 1000
    # clean responses a second over this window and the one before (workers report theirs
    # with their next lease: one window alone lags)
    elapsed = (now_ms - f.get("window", 0.0) + f.get("pwin", 0.0)) / 1000
    observed = (
        (f.get("oks", 0.0) + f.get("pok", 0.0)) / elapsed
        if f.get("window", 0.0) > 0 and elapsed >= OBSERVE_MIN
        else None
    )
    banned = f.get("banned", _NEVER)
    ban_age = (now_ms - banned) / 1000 if banned > _NEVER else None
    idle = (now_ms - used_ms) / 1000
    if idle > ACTIVE_WINDOW:
        state = "idle"
    elif cooldown > 0:
        state = "cooling"
    elif ban_age is not None and ban_age <= ACTIVE_WINDOW:
        state = "banned"
    elif budget is not None and (
        observed >= NEAR_BUDGET * budget
        if observed is not None
        else next_slot is not None and next_slot > -max(1 / budget, SLOT_SLACK)
    ):
        state = "full"
    else:
        state = "slack"
    site, _, proxy = key.partition("@")
    return {
        "key": key,
        "site": site,
        "proxy": proxy or None,
        "state": state,
        "budget": rounded(budget),
        "rate": rounded(rate),
        "cap": rounded(cap),
        "observed": rounded(observed),
        "next_slot": rounded(next_slot),
        "cooldown": round(cooldown, 2),
        "bans": int(f.get("bans", 0)),
        "bans_recent": recent_bans,
        "last_ban_age": rounded(ban_age),
        "idle": round(idle, 2),
        "phase": learning.phase(f, now_ms),
        "learned": rounded(f.get("good") or None),
        "ceiling": rounded(f.get("bad") or None),
        "why": learning.why(f),
        "learned_age": rounded((now_ms - f["learned"]) / 1000 if f.get("learned") else None),
    }


def bound_by(
    keys: Sequence[dict[str, Any]],
    *,
    waiting: int,
    workers_alive: int,
    paused: bool,
    hub: dict[str, Any] | None,
) -> tuple[str, str]:
    """Which limit binds the crawl now, and why: ``(verdict, one-line reason)``, in this order:

    ``none`` nothing waits (no queued, start-URL or leased request) or the crawl is paused;
    ``hub`` a PING took HUB_SLOW_MS or more, or Redis used HUB_BUSY_CPU of a core;
    ``site`` at least half of the active keys are full, cooling down or banned: add proxies;
    ``workers`` otherwise (keys below their budget while requests wait): add worker hosts.
    """
    if paused:
        return "none", "paused"
    if waiting <= 0:
        return "none", "idle: no request waits"
    if hub is not None:
        cpu = hub.get("cpu")
        if hub["rtt_ms"] >= HUB_SLOW_MS:
            return "hub", f"Redis answers a PING in {hub['rtt_ms']:.0f} ms: relieve the hub"
        if cpu is not None and cpu >= HUB_BUSY_CPU:
            return "hub", f"Redis uses {cpu:.0%} of a core: relieve the hub"
    if not workers_alive:
        return "workers", f"{waiting:,} requests wait and no worker is alive: start workers"
    active = [k for k in keys if k["state"] != "idle"]
    held = [k for k in active if k["state"] in SITE_BOUND]
    if active and 2 * len(held) >= len(active):
        states = ", ".join(
            f"{sum(1 for k in held if k['state'] == s)} {s}"
            for s in SITE_BOUND
            if any(k["state"] == s for k in held)
        )
        return "site", f"{len(held)} of {len(active)} active keys held ({states}): add proxies"
    slack = len(active) - len(held)
    return "workers", (
        f"{slack} of {len(active)} active keys below their budget while requests wait: add hosts"
        if active
        else "requests wait, no key paced: add hosts"
    )


def _recent_bans(rows: Any, prefix: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for member in rows if isinstance(rows, list) else []:
        _, _, state = text(member).partition(" ")
        if state.startswith(prefix):
            key = state[len(prefix) :]
            counts[key] = counts.get(key, 0) + 1
    return counts


def politeness_snapshot(
    client: redis.Redis,
    namespace: str,
    now_ms: float,
    *,
    waiting: int = 0,
    workers_alive: int = 0,
    paused: bool = False,
    hub: dict[str, Any] | None = None,
    limit: int = POLITENESS_KEYS,
) -> dict[str, Any]:
    """The ``politeness`` section of a crawl (two pipelined round trips): its ``limit`` most
    recently used keys (``namespace`` is ``POLITENESS_NAMESPACE``), and :func:`bound_by`.

    ``now_ms`` is the scripts' clock (Redis ``TIME``; a test's injected clock). A state hash with
    a field that is not a number is left out and named in ``warnings``.
    """
    k = SpiderKeys.for_client(namespace, client)
    prefix = k.politeness("")
    pipe = client.pipeline(transaction=False)
    pipe.zrevrange(k.politeness_index, 0, limit - 1, withscores=True)
    pipe.zcard(k.politeness_index)
    pipe.zrangebyscore(k.politeness_bans, now_ms - BAN_WINDOW * 1000, "+inf")
    pipe.lrange(k.politeness_history, -HISTORY_READ, -1)
    index, total, ban_rows, history = pipe.execute(raise_on_error=False)
    used = [(text(m), float(t)) for m, t in index] if isinstance(index, list) else []
    bans = _recent_bans(ban_rows, prefix)
    pipe = client.pipeline(transaction=False)
    for name, _ in used:
        pipe.hgetall(name)
    hashes = pipe.execute(raise_on_error=False) if used else []
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    skipped = 0
    for (name, used_ms), raw in zip(used, hashes, strict=True):
        key = name[len(prefix) :] if name.startswith(prefix) else ""
        problem = None if key else f"politeness index member {name[:80]!r} is not a state hash"
        if key and isinstance(raw, Exception):  # a key of another type
            problem = f"politeness key {key!r}: {str(raw)[:80]}; key skipped"
        elif key:
            if not raw:
                continue  # expired since its last use (the index is trimmed once a window)
            try:
                rows.append(
                    politeness_key(key, decode_hash(raw), now_ms, used_ms, bans.get(key, 0))
                )
            except learning.BadKeyState as exc:
                problem = f"{exc} is not a number; key skipped"
        if problem:
            skipped += 1
            if len(warnings) < MAX_WARNINGS:
                warnings.append(problem)
    if skipped > len(warnings):
        warnings.append(f"{skipped - len(warnings)} more politeness keys skipped")
    verdict, reason = bound_by(
        rows, waiting=waiting, workers_alive=workers_alive, paused=paused, hub=hub
    )
    return {
        "namespace": namespace,
        "bound": verdict,
        "reason": reason,
        "keys_total": total if isinstance(total, int) else None,
        "keys_active": sum(1 for r in rows if r["state"] != "idle"),
        "bans_recent": sum(bans.values()),
        "keys": rows,
        "history": rate_history(history, prefix, rows[:HISTORY_KEYS], now_ms),
        "warnings": warnings,
    }


def rate_history(
    entries: Any, prefix: str, rows: Sequence[dict[str, Any]], now_ms: float
) -> dict[str, list[list[Any]]]:
    """``politeness.history``: for each of ``rows``' keys, how its rate moved over the last
    HISTORY_SECONDS — ``[seconds, rate, why]`` per change (``why``: ``learning.WHY``'s words;
    ``ban`` and ``slow-down`` are the chart's marks), oldest first. Unreadable entries are
    skipped."""
    wanted = {r["key"] for r in rows}
    found: dict[str, list[list[Any]]] = {key: [] for key in wanted}
    for entry in entries if isinstance(entries, list) else []:
        parts = text(entry).split(" ", 3)
        if len(parts) != 4 or not parts[3].startswith(prefix):
            continue
        key = parts[3][len(prefix) :]
        try:
            at, rate, why = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            continue
        if key in found and now_ms - at <= HISTORY_SECONDS * 1000 and math.isfinite(rate):
            found[key].append([round(at / 1000, 3), rate, learning.WHY.get(why, "start")])
    return found

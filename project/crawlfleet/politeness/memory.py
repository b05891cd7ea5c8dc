"""What the hub remembers of a crawl's politeness keys, for operators: every key's learned rate,
ceiling, phase and when and how it was learned (:func:`learned_keys`), and forgetting some or all
of it (:func:`forget`). ``crawlfleet politeness`` shows, exports and resets with these; the
workers never import this module.

A namespace's keys are the members of its index (``SpiderKeys(namespace).politeness_index``),
each a state hash (``lua/state.lua``); they are read in pipelined batches of :data:`BATCH`.
"""

from __future__ import annotations

from typing import Any, cast

import redis

from crawlfleet.hub.clock import hub_ms
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.politeness import learning
from crawlfleet.politeness.budget import text

BATCH = 500


def namespace_of(client: redis.Redis, spider: str) -> str:
    """The politeness namespace the spider's workers recorded (``POLITENESS_NAMESPACE``), else
    the spider's name."""
    keys = SpiderKeys.for_client(spider, client)
    recorded = client.hget(keys.frontier, "politeness_namespace")
    return text(recorded) if recorded else spider


def learned_keys(client: redis.Redis, namespace: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Every key of ``namespace`` the index names, most recently used first, and one warning
    line per state hash that could not be read (left out)."""
    keys = SpiderKeys.for_client(namespace, client)
    prefix = keys.politeness("")
    members = cast(
        list[tuple[bytes | str, float]],
        client.zrevrange(keys.politeness_index, 0, -1, withscores=True),
    )
    now_ms = hub_ms(client)
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    for start in range(0, len(members), BATCH):
        batch = members[start : start + BATCH]
        pipe = client.pipeline(transaction=False)
        for name, _ in batch:
            pipe.hgetall(name)
        for (name, used), raw in zip(batch, pipe.execute(raise_on_error=False), strict=True):
            state = text(name)
            key = state[len(prefix) :] if state.startswith(prefix) else state
            if not isinstance(raw, dict) or not raw:
                continue  # expired since the index named it
            try:
                fields = learning.decode(key, {text(k): text(v) for k, v in raw.items()})
            except learning.BadKeyState as exc:
                warnings.append(f"{exc}; key left out")
                continue
            rows.append(row(key, fields, now_ms, float(used)))
    return rows, warnings


def row(key: str, fields: dict[str, float], now_ms: float, used_ms: float) -> dict[str, Any]:
    """One key's learned state (the export format: one JSON object per key)."""
    site, _, proxy = key.partition("@")
    learned_ms = fields.get("learned", 0.0)
    return {
        "key": key,
        "site": site,
        "proxy": proxy or None,
        "phase": learning.phase(fields, now_ms),
        "rate": fields.get("rate") or None,
        "learned": fields.get("good") or None,
        "ceiling": fields.get("bad") or None,
        "cap": fields.get("cap") or None,
        "why": learning.why(fields),
        "learned_at": round(learned_ms / 1000, 3) if learned_ms > 0 else None,
        "last_used": round(used_ms / 1000, 3),
        "bans": int(fields.get("bans", 0)),
    }


def forget(client: redis.Redis, namespace: str, site: str | None = None) -> int:
    """Delete what ``namespace``'s keys learned — every key, or those of ``site`` (its own key
    and every ``site@proxy``); how many were deleted. A worker still crawling the site starts
    the key again at its start rate. Forgetting every key forgets their recent bans and the
    history of their rates too."""
    keys = SpiderKeys.for_client(namespace, client)
    prefix = keys.politeness("")
    names = [text(n) for n in cast(list[bytes | str], client.zrange(keys.politeness_index, 0, -1))]
    chosen = [
        n for n in names if site is None or n[len(prefix) :].partition("@")[0] == site.lower()
    ]
    deleted = 0
    for start in range(0, len(chosen), BATCH):
        batch = chosen[start : start + BATCH]
        pipe = client.pipeline(transaction=False)
        for name in batch:
            pipe.delete(name)
        deleted += sum(int(n) for n in pipe.execute())
        client.zrem(keys.politeness_index, *batch)
    if site is None:
        client.delete(keys.politeness_bans, keys.politeness_history)
    return deleted

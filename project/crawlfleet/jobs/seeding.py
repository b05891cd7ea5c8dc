"""Seeding a crawl: start URLs checked as a worker checks them, then added all at once or none.

``check_entry`` is the check a worker applies to a start entry (``frontier.startfeed.start_entry``:
a plain ``http(s)://`` URL or a JSON object ``{"url": …, "meta", "method", "body", "headers",
"priority", "dont_filter", "callback"}``), ``add_entries`` adds checked entries to the spider's
start-URL key (the key and type its workers recorded in ``<spider>:frontier``) in one
transaction, and records it in the history of the spider's active job. ``crawlfleet seed`` and
the dashboard's seed form are two faces of these.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from crawlfleet.frontier.serialization import EntryPolicy
from crawlfleet.frontier.startfeed import start_entry
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.jobs import control, store

CHUNK = 1000
# What a worker with the default SCHEDULER_URL_SCHEMES accepts (start entries name no class).
POLICY = EntryPolicy()


def check_entry(text: str, policy: EntryPolicy = POLICY) -> str:
    """The entry to store for one line (a URL or a JSON object); raises ValueError with why not."""
    data = start_entry(text, policy)
    if not text.startswith("{"):
        return text
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _decode(raw: Any) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


def add_entries(client: redis.Redis, spider: str, entries: list[str], by: str) -> str:
    """Add checked ``entries`` to the spider's start URLs in one transaction (the key and type
    the workers recorded); recorded in the history of the spider's active job, if any. The line
    to show."""
    names = SpiderKeys.for_client(spider, client)
    meta = _decode(client.hgetall(names.frontier))
    key = meta.get("start_urls_key") or names.start_urls
    as_set = meta.get("start_urls_as_set") == "1"
    pipe = client.pipeline(transaction=True)
    for i in range(0, len(entries), CHUNK):
        chunk = entries[i : i + CHUNK]
        if as_set:
            pipe.sadd(key, *chunk)
        else:
            pipe.rpush(key, *chunk)
    pipe.execute()
    said = f"added {len(entries)} start URL(s) to {key} ({'set' if as_set else 'list'})"
    job = control.running_job_of(client, spider)
    if job is not None:
        store.record_history(client, str(job["id"]), by, "seed", said)
    return said

"""A status view shaped like ``crawlfleet status --json`` (for renderers; no Redis involved)."""

from __future__ import annotations

from typing import Any


def worker(wid: str, alive: bool = True, ppm: float | None = 120.5) -> dict[str, Any]:
    return {
        "id": wid,
        "host": "b",
        "pid": 42,
        "alive": alive,
        "registered": alive,
        "heartbeat_age": 0.4 if alive else 90.0,
        "lease_expires_in": 2.6 if alive else None,
        "leased": 3 if alive else 0,
        "acked": 100,
        "failed": 1,
        "pages": 101,
        "items": 50,
        "pages_per_minute": ppm,
        "items_per_minute": 60.0,
        "stopped": not alive,
        "frontier": {"scheduler/acked": 100, "dupefilter/filtered": 7},
        "scrapy": {"response_received_count": 101, "memusage/max": 52428800},
    }


def agent(name: str, alive: bool = True, stopped: bool = False) -> dict[str, Any]:
    """A job agent of ``hub.agents``: alive, stopped cleanly, or (neither) down."""
    return {
        "name": name,
        "host": f"host-{name}",
        "runner": "systemd",
        "alive": alive,
        "stopped": stopped,
        "deadline": None if stopped else (103.0 if alive else 90.0),
        "heartbeat_age": 0.5 if alive else 20.0,
    }


def key(name: str, state: str, budget: float | None = 20.0, bans: int = 0) -> dict[str, Any]:
    site, _, proxy = name.partition("@")
    return {
        "key": name,
        "site": site,
        "proxy": proxy or None,
        "state": state,
        "budget": budget,
        "rate": budget,
        "cap": None,
        "observed": 19.5 if state == "full" else None,
        "next_slot": 0.2,
        "cooldown": 12.5 if state == "cooling" else 0.0,
        "bans": bans,
        "bans_recent": bans,
        "last_ban_age": 3.0 if bans else None,
        "idle": 0.1,
        "phase": "cooling down" if state == "cooling" else "holding",
        "learned": 9.5 if state == "cooling" else 19.0,
        "ceiling": 20.0 if state == "cooling" else 21.0,
        "why": "ban" if state == "cooling" else "hold",
        "learned_age": 3.0 if bans else 40.0,
    }


def politeness() -> dict[str, Any]:
    keys = [key(f"books.test@10.0.0.{i}:3128", "full") for i in range(1, 12)]
    keys.insert(0, key("books.test@10.0.0.99:3128", "cooling", 10.0, bans=2))
    return {
        "namespace": "book",
        "bound": "site",
        "reason": "12 of 12 active keys held (11 full, 1 cooling): add proxies",
        "keys_total": 12,
        "keys_active": 12,
        "bans_recent": 2,
        "keys": keys,
        "warnings": ["politeness key 'x': field 'rate' = 'zzz' is not a number; key skipped"],
    }


def view() -> dict[str, Any]:
    spider = {
        "spider": "book",
        "paused": False,
        "queue_key": "book:requests",
        "queue_class": "PriorityQueue",
        "queued": 1234,
        "start_urls": 0,
        "leased": 3,
        "acked": 200,
        "enqueued": 1437,
        "dequeued": 203,
        "requeued": 0,
        "filtered": 17,
        "failed": 2,
        "deadletter": 1,
        "items": 150,
        "total": 9216,
        "pages_per_minute": 120.5,
        "seeding": None,
        "workers_alive": 1,
        "workers": [worker("b:1:aa"), worker("c:2:bb", alive=False, ppm=0.0)],
        "dupefilter": {
            "class": "BloomDupeFilter",
            "key": "book:bloomfilter",
            "fingerprints": 1437,
            "capacity": 1000000,
            "fill_ratio": 0.0123,
            "error_rate": 2.5e-12,
            "design_error_rate": 0.001,
            "over_capacity": False,
        },
        "counters": {"scheduler/acked": 200, "dupefilter/filtered": 17},
        "time": 1000.0,
        "politeness": politeness(),
    }
    return {
        "schema": 1,
        "time": 1000.0,
        "redis": "redis://:***@hub:6379/0",
        "hub": {
            "rtt_ms": 0.4,
            "cpu": 0.25,
            "time": 100.0,
            "used_memory": 1024,
            "maxmemory": 0,
            "jobs": [],
            "agents": [agent("b"), agent("c", alive=False, stopped=True)],
            "bans": {},
        },
        "spiders": [spider],
        "pools": {
            "proxypool": {"url": "http://hub:5555/count", "count": 12, "error": None},
            "accountpool": {
                "url": "http://hub:6777/demosite/count",
                "count": None,
                "error": "HTTP 401: invalid API key",
                "site": "demosite",
            },
        },
    }

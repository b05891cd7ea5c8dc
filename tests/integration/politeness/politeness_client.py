"""One worker process of the shared-budget test: takes slots of one key for a while, writes the
times it used them (seconds on the shared clock) as JSON.

Run as ``python politeness_client.py REDIS_URL KEY RATE LEASE_SIZE SECONDS OUT``: it reports
itself ready on the list ``test:ready``, starts when ``test:go`` holds the shared start time
(``time.monotonic()``, the same clock in every process of the machine) and stops SECONDS later.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import redis

from crawlfleet.politeness.budget import Budget
from crawlfleet.politeness.config import Limits, PolitenessConfig


def main() -> None:
    url, key, rate, lease, seconds, out = sys.argv[1:]
    client = redis.Redis.from_url(url)
    r = float(rate)
    config = PolitenessConfig(limits=Limits(r, r, r, 1), lease_size=int(lease), namespace="t")
    client.rpush("test:ready", "1")
    deadline = time.monotonic() + 60
    while (go := client.get("test:go")) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert go is not None, "no start signal"
    t0 = float(go)
    budget = Budget(client, config, clock=lambda: time.monotonic() - t0)
    used: list[float] = []
    end = float(seconds)
    while (now := budget.clock()) < end:
        if now < 0:
            time.sleep(-now)
            continue
        wait = budget.acquire(key)
        if wait == 0:
            used.append(budget.clock())
        else:
            time.sleep(min(wait, 0.05))
    Path(out).write_text(json.dumps({"used": used, "stats": budget.stats}))


if __name__ == "__main__":
    main()

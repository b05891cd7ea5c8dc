"""Politeness budget benchmark (issue 16): the hub's cost per request of the cluster-wide budget.

Four workers (``Budget`` objects in this process, each its own connection) share one key at
200 requests/s and take every slot, with lease sizes 1, 8 and 32 side by side on the same fresh
redis-server. The clock is injected and jumps to the next time a worker may send (as a scheduler
serving keys by ``next_allowed`` would), so the run measures cost, not waiting: per
request, round trips (leases), Redis commands (``total_commands_processed``, Lua's inner calls
included), the worker's CPU time and the Redis server's. The largest number of requests in any
one-second window is reported beside the bound ceil(rate) + burst.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

import redis

from crawlfleet.politeness.budget import Budget
from crawlfleet.politeness.config import Limits, PolitenessConfig

SECTION = "politeness budget (issue 16)"
RATE, BURST, WORKERS = 200.0, 1, 4


def row(scenario: str, metric: str, value: float, unit: str, note: str = "") -> dict[str, Any]:
    return {
        "section": SECTION,
        "scenario": scenario,
        "metric": metric,
        "value": value,
        "unit": unit,
        "note": note,
    }


def _commands(client: redis.Redis) -> int:
    return int(client.info("stats")["total_commands_processed"])


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def most_in_a_second(times: list[float]) -> int:
    best, j = 0, 0
    for i, start in enumerate(times):
        while j < len(times) and times[j] < start + 1.0:
            j += 1
        best = max(best, j - i)
    return best


def measure(url: str, lease: int, seconds: float) -> dict[str, float]:
    probe = redis.Redis.from_url(url)
    probe.flushall()
    now = [10.0]
    config = PolitenessConfig(
        limits=Limits(RATE, RATE, RATE, BURST), lease_size=lease, namespace="bench"
    )
    workers = [
        Budget(redis.Redis.from_url(url), config, clock=lambda: now[0]) for _ in range(WORKERS)
    ]
    rng = random.Random(lease)
    used: list[float] = []
    commands, server_cpu = _commands(probe), _redis_cpu(probe)
    cpu = time.process_time()
    end = now[0] + seconds
    while now[0] < end:
        # as a scheduler does: serve the key when it may next be hit, never poll in between
        now[0] = max(now[0], min(b.next_allowed("site.example") for b in workers))
        before = len(used)
        for b in rng.sample(workers, WORKERS):
            while b.acquire("site.example") == 0:
                used.append(now[0])
        if len(used) == before:
            now[0] += 0.001
    cpu = time.process_time() - cpu
    # INFO itself counts as one command each
    commands = _commands(probe) - commands - 1
    server_cpu = _redis_cpu(probe) - server_cpu
    n = len(used)
    return {
        "requests": n,
        "round_trips": sum(b.stats["leases"] for b in workers) / n,
        "commands": commands / n,
        "cpu_us": cpu / n * 1e6,
        "server_cpu_us": server_cpu / n * 1e6,
        "max_window": most_in_a_second(used),
        "throughput": n / seconds / RATE,
    }


def run(ctx: Any) -> list[dict[str, Any]]:
    seconds = 10.0 if ctx.quick else 60.0
    server = ctx.start_redis()
    rows: list[dict[str, Any]] = []
    note = f"{WORKERS} workers, one key at {RATE:g}/s, {seconds:g} s of injected clock"
    for lease in (1, 8, 32):
        m = measure(server.url, lease, seconds)
        name = f"POLITENESS_LEASE_SIZE={lease}"
        rows += [
            row(name, "hub round trips per request", m["round_trips"], "1", note),
            row(name, "Redis commands per request", m["commands"], "1", "Lua's inner calls count"),
            row(name, "worker CPU per request", m["cpu_us"], "µs", "budget code + client side"),
            row(name, "Redis CPU per request", m["server_cpu_us"], "µs"),
            row(
                name,
                "most requests in a 1 s window",
                m["max_window"],
                "1",
                f"bound ceil(rate) + burst = {math.ceil(RATE) + BURST}",
            ),
            row(name, "throughput / rate", m["throughput"], "ratio", f"{m['requests']:g} requests"),
        ]
    return rows

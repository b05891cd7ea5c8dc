"""Account pool benchmark: logins per second against the demo site, and ``random`` selection
against the anchor's.

* logins/s: the real generator (``Generator.run_site``) logs in N accounts against the real demo
  site (``crawlfleet demosite``, one uvicorn worker, no rate limit, in a subprocess on loopback,
  with 0 and 20 ms of added latency per response) at several concurrency limits. Concurrency 1
  is how the anchor (Python3WebSpider/AccountPool) logs in: one account after the other. Each
  run starts with no credentials; every login is a real HTTP round trip plus one Lua call to
  store the credential. Client and site share the machine's cores, so absolute figures are
  modest; compare rows.
* random selection: ours (one Lua script: ZCOUNT + ZRANGE by rank + HGET, O(log N)) against the
  anchor's (``HVALS`` of the whole credentials hash, then ``random.choice``), called one at a time
  from one asyncio client on the same Redis, at several pool sizes.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis
from support.net import free_port
from support.services import start_process, wait_healthy

from crawlfleet.accountpool.adapters import build_adapter
from crawlfleet.accountpool.crypto import PasswordBox, generate_key
from crawlfleet.accountpool.generator import Generator
from crawlfleet.accountpool.sites import load_sites
from crawlfleet.accountpool.store import (
    AccountStore,
    CredentialRecord,
    Keys,
    connect,
)

ROOT = Path(__file__).resolve().parents[2]

LOGINS = "account pool logins"
CONCURRENCIES = (1, 8, 32)
RANDOM = "account pool random"


def _start_demosite(
    workdir: Path, accounts: dict[str, str], latency_ms: int
) -> tuple[subprocess.Popen[bytes], str]:
    accounts_file = workdir / "bench-accounts.txt"
    accounts_file.write_text("".join(f"{u}:{p}\n" for u, p in accounts.items()))
    port = free_port()
    process = start_process(
        [
            sys.executable,
            "-m",
            "crawlfleet.cli",
            "demosite",
            "--port",
            str(port),
            "--books",
            "20",
            "--accounts",
            f"@{accounts_file}",
            "--log-level",
            "warning",
            "--latency-ms",
            str(latency_ms),
        ],
        workdir / "bench-demosite.log",
        cwd=ROOT / "project",
    )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(process, f"{url}/health", workdir / "bench-demosite.log", timeout=30)
    return process, url


async def _logins(
    redis_url: str, site_url: str, accounts: dict[str, str], latency_ms: int
) -> list[dict[str, Any]]:
    redis = connect(redis_url)
    store = AccountStore(redis, PasswordBox(generate_key()))
    adapters = {"demosite": build_adapter(load_sites(None, {"demosite": site_url})["demosite"])}
    await store.add_accounts("demosite", accounts.items())
    rows = []
    keys = Keys("demosite")
    async with httpx.AsyncClient(
        timeout=10, trust_env=False, limits=httpx.Limits(max_connections=64)
    ) as client:
        for concurrency in CONCURRENCIES:
            await redis.delete(keys.credentials, keys.expiry, keys.tokens)
            generator = Generator(
                store,
                adapters,
                client,
                concurrency=concurrency,
                refresh_before=60,
                backoff_base=60,
                backoff_max=60,
            )
            started = time.perf_counter()
            result = await generator.run_site("demosite")
            elapsed = time.perf_counter() - started
            ok = result.counts["logins_ok"]
            if ok != len(accounts):
                raise RuntimeError(f"only {ok} of {len(accounts)} logins succeeded")
            who = "anchor-style (one after the other)" if concurrency == 1 else "crawlfleet"
            who += f", site latency {latency_ms} ms"
            rows.append(
                {
                    "section": LOGINS,
                    "scenario": f"{who}, concurrency {concurrency}",
                    "metric": "logins/s",
                    "value": ok / elapsed,
                    "unit": "1/s",
                    "note": f"{ok} accounts; demo site: 1 worker, loopback, "
                    f"{latency_ms} ms added latency",
                }
            )
    await redis.aclose()
    return rows


async def _random(
    redis_url: str, sizes: list[int], picks: int, budget: float
) -> list[dict[str, Any]]:
    redis = connect(redis_url)
    store = AccountStore(redis, PasswordBox(generate_key()))
    keys = Keys("bench")
    rows = []
    for size in sizes:
        await redis.delete(keys.credentials, keys.expiry, keys.tokens)
        await store.add_accounts("bench", ((f"user{i}", "pw") for i in range(size)))
        now = time.time()
        for start in range(0, size, 200):
            # A realistic JWT-sized token (~200 bytes); 200 writes in flight at a time.
            await asyncio.gather(
                *(
                    store.set_credential(
                        "bench",
                        f"user{i}",
                        CredentialRecord(f"eyJ{i:08d}" + "x" * 190, now + 3600, now + 3000, now),
                    )
                    for i in range(start, min(size, start + 200))
                )
            )
        for name, pick in (
            (
                "crawlfleet (Lua: ZCOUNT + ZRANGE by rank + HGET)",
                lambda: store.random_token("bench", time.time()),
            ),
            (
                "anchor (HVALS whole hash + random.choice)",
                lambda: _anchor_random(redis, keys.credentials),
            ),
        ):
            for _ in range(3):
                await pick()
            # Up to ``picks`` picks or ``budget`` seconds, whichever ends first: the anchor
            # needs a large fraction of a second per pick at 10,000 credentials.
            done, started = 0, time.perf_counter()
            while done < picks and time.perf_counter() - started < budget:
                await pick()
                done += 1
            elapsed = time.perf_counter() - started
            rows.append(
                {
                    "section": RANDOM,
                    "scenario": f"{name}, {size} credentials",
                    "metric": "picks/s",
                    "value": done / elapsed,
                    "unit": "1/s",
                    "note": "one asyncio client, one pick at a time",
                }
            )
    await redis.aclose()
    return rows


async def _anchor_random(redis: Redis, key: str) -> bytes:
    return random.choice(await redis.hvals(key))


def run(ctx: Any) -> list[dict[str, Any]]:
    accounts_n = 100 if ctx.quick else 400
    accounts = {f"user{i}": f"pw-{i}-{random.getrandbits(32):x}" for i in range(accounts_n)}
    redis_server = ctx.start_redis()
    rows: list[dict[str, Any]] = []
    # 0 ms: the site's own speed is the limit; 20 ms: a remote site, where concurrency pays.
    for latency_ms in (0, 20):
        site, url = _start_demosite(ctx.workdir, accounts, latency_ms)
        try:
            rows += asyncio.run(_logins(redis_server.url, url, accounts, latency_ms))
        finally:
            site.terminate()
            site.wait(timeout=10)
    sizes = [100, 1000] if ctx.quick else [100, 1000, 10000]
    rows += asyncio.run(
        _random(redis_server.url, sizes, 300 if ctx.quick else 2000, 2.0 if ctx.quick else 5.0)
    )
    return rows

"""Sources on loopback: static list, file, provider URLs, an entry-point plug-in; garbage
counted."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import redis
from proxypool_helpers import list_site
from support.net import free_port

from crawlfleet.proxypool.sources import (
    FetchCounts,
    FileSource,
    ProxySource,
    StaticSource,
    UrlSource,
    fetch_once,
)
from crawlfleet.proxypool.store import ProxyStore, connect

KEY = "pp:sources"
PROVIDER_LIST = "\n".join(
    [
        "10.1.0.1:8080",
        "  10.1.0.2:8080  ",
        "",
        "# a comment line is not counted",
        "<html>garbage</html>",
        "10.1.0.3",
        "socks5://10.1.0.4:1080",
        "http://u:p@10.1.0.5:3128",
        "10.1.0.1:8080",
    ]
)


def fetch(redis_url: str, sources: list[ProxySource], max_size: int = 1000) -> FetchCounts:
    async def main() -> FetchCounts:
        client = connect(redis_url)
        try:
            async with httpx.AsyncClient(timeout=5) as http:
                return await fetch_once(sources, ProxyStore(client, KEY, max_size), http, 5)
        finally:
            await client.aclose()

    return asyncio.run(main())


def members(client: redis.Redis) -> dict[str, float]:
    return {m.decode(): s for m, s in client.zrange(KEY, 0, -1, withscores=True)}


def test_every_kind_of_source_with_garbage_and_failures(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    proxy_file = tmp_path / "proxies.txt"
    proxy_file.write_text("10.2.0.1:80\nnot-a-proxy\n10.1.0.1:8080\n")
    dead_url = f"http://127.0.0.1:{free_port()}/list"
    with list_site({"/list": (200, PROVIDER_LIST), "/broken": (500, "oops")}) as site:
        sources: list[ProxySource] = [
            StaticSource(["http://10.3.0.1:3128"]),
            FileSource(str(proxy_file)),
            FileSource(str(tmp_path / "missing.txt")),
            UrlSource(f"{site}/list?apikey=hunter2"),
            UrlSource(f"{site}/broken"),
            UrlSource(dead_url),
        ]
        counts = fetch(redis_url, sources)
    assert counts == FetchCounts(
        sources=6, errors=3, lines=11, invalid=4, added=5, existing=0, full=0
    )
    assert members(redis_client) == {
        "http://10.1.0.1:8080": 10.0,
        "http://10.1.0.2:8080": 10.0,
        "http://u:p@10.1.0.5:3128": 10.0,
        "http://10.2.0.1:80": 10.0,
        "http://10.3.0.1:3128": 10.0,
    }
    stats = redis_client.hgetall(f"{KEY}:stats")
    assert stats[b"fetch_invalid"] == b"4" and stats[b"fetch_errors"] == b"3"


def test_refetch_keeps_scores_and_the_cap_refuses(
    redis_url: str, redis_client: redis.Redis
) -> None:
    source = StaticSource(["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"])
    assert fetch(redis_url, [source], max_size=2).full == 1
    redis_client.zadd(KEY, {"http://10.0.0.1:1": 100})
    again = fetch(redis_url, [source], max_size=2)
    assert (again.added, again.existing, again.full) == (0, 2, 1)
    assert members(redis_client) == {"http://10.0.0.2:1": 10.0, "http://10.0.0.1:1": 100.0}


PLUGIN = """
class Source:
    name = "demo-list"

    async def fetch(self, client):
        return ["10.9.0.1:8000", "not a proxy", "https://10.9.0.2:8443"]


class Broken:
    pass
"""


def install_plugin(root: Path) -> dict[str, str]:
    """A distribution on PYTHONPATH declaring two entry points (no pip, no network)."""
    (root / "demo_source.py").write_text(PLUGIN)
    info = root / "demo_source-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-source\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[crawlfleet.proxypool.sources]\ndemo = demo_source:Source\nbroken = demo_source:Broken\n"
    )
    return {"PYTHONPATH": str(root)}


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.proxypool.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **env},
    )


def test_entry_point_plugin(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    env = install_plugin(tmp_path)
    done = run_cli(
        "fetch",
        "--once",
        "--redis-url",
        redis_url,
        "--redis-key",
        KEY,
        "--source-plugin",
        "demo",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert members(redis_client) == {"http://10.9.0.1:8000": 10.0, "https://10.9.0.2:8443": 10.0}
    cycle = [line for line in done.stderr.splitlines() if "event=fetch_cycle" in line]
    assert len(cycle) == 1
    assert "sources=1 errors=0 lines=3 invalid=1 added=2" in cycle[0]
    assert "event=source_invalid_lines" in done.stderr and "source=demo-list" in done.stderr

    broken = run_cli(
        "fetch", "--once", "--redis-url", redis_url, "--source-plugin", "broken", env=env
    )
    assert broken.returncode == 2
    assert broken.stderr.strip() == (
        "crawlfleet proxypool fetch: error: source plug-in 'broken' has no name and "
        "async fetch(client)"
    )


def test_source_errors_are_logged_without_provider_keys(redis_url: str, tmp_path: Path) -> None:
    with list_site({}) as site:
        done = run_cli(
            "fetch",
            "--once",
            "--redis-url",
            redis_url,
            "--source-url",
            f"{site}/list?apikey=hunter2",
            env={},
        )
    assert done.returncode == 0
    assert "event=source_error" in done.stderr and 'error="HTTP 404"' in done.stderr
    assert "hunter2" not in done.stderr
    assert "sources=1 errors=1" in done.stderr

"""`crawlfleet seed`, `pause`/`resume` and `purge` against a real Redis and real crawls."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from ops_helpers import assert_one_line_error, cli, cli_process, crawl_settings
from support.net import free_port

SPIDER = "site"


def test_seeded_urls_are_crawled_by_a_worker(
    site, redis_url: str, start_worker, tmp_path: Path
) -> None:
    site.pages = 30
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(
        f"# pages outside the start page's first links\n{site.url}/p/20\n\n"
        + json.dumps({"url": f"{site.url}/p/21", "priority": 5})
        + "\n"
    )
    client = redis.Redis.from_url(redis_url)
    refused = cli("seed", SPIDER, f"{site.url}/p/25", "--redis-url", redis_url)
    assert_one_line_error(refused, 1, "no crawl named 'site'")
    assert client.exists(f"{SPIDER}:start_urls") == 0

    added = cli(
        "seed", SPIDER, f"{site.url}/p/25", "-f", str(seeds), "-f", "-", "--new",
        "--redis-url", redis_url, stdin=f"{site.url}/p/26\n",
    )  # fmt: skip
    assert added.code == 0, added.err
    assert "added 4 start URL(s) to site:start_urls (list)" in added.out
    entries = [e.decode() for e in client.lrange(f"{SPIDER}:start_urls", 0, -1)]
    assert entries[0] == f"{site.url}/p/25" and entries[-1] == f"{site.url}/p/26"
    assert json.loads(entries[2]) == {"url": f"{site.url}/p/21", "priority": 5}

    worker = start_worker(site.url, crawl_settings(redis_url))
    assert worker.wait() == 0
    assert client.llen(f"{SPIDER}:start_urls") == 0
    assert site.crawled() == site.expected()
    assert max(site.hits[p] for p in site.expected()) == 1

    # Now the spider is known: no --new needed; a set start key is honoured as a set.
    client.hset(f"{SPIDER}:frontier", "start_urls_as_set", 1)
    again = cli("seed", SPIDER, f"{site.url}/p/1", "--redis-url", redis_url)
    assert again.code == 0 and "(set)" in again.out
    assert client.smembers(f"{SPIDER}:start_urls") == {f"{site.url}/p/1".encode()}


def test_malformed_seed_lines_add_nothing(redis_url: str, tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://127.0.0.1:9/a\nftp://127.0.0.1/b\n")
    client = redis.Redis.from_url(redis_url)
    bad_file = cli_process("seed", SPIDER, "-f", str(seeds), "--new", "--redis-url", redis_url)
    assert_one_line_error(bad_file, 2, "line 2", "ftp://", "nothing was added")
    bad_json = cli(
        "seed", SPIDER, "-f", "-", "--new", "--redis-url", redis_url, stdin='{"url": 3}\n'
    )
    assert_one_line_error(bad_json, 2, "stdin line 1", '"url"')
    bad_arg = cli("seed", SPIDER, "not a url", "--new", "--redis-url", redis_url)
    assert_one_line_error(bad_arg, 2, "argument 1")
    empty = cli("seed", SPIDER, "--new", "--redis-url", redis_url)
    assert_one_line_error(empty, 2, "no URLs given")
    missing = cli("seed", SPIDER, "-f", str(tmp_path / "nope"), "--new", "--redis-url", redis_url)
    assert_one_line_error(missing, 2, "cannot read")
    assert client.exists(f"{SPIDER}:start_urls") == 0


def test_pause_and_resume_set_and_clear_the_key(site, redis_url: str, start_worker) -> None:
    site.pages = 5
    assert start_worker(site.url, crawl_settings(redis_url)).wait() == 0
    client = redis.Redis.from_url(redis_url)
    paused = cli("pause", SPIDER, "--redis-url", redis_url)
    assert paused.code == 0 and "paused site" in paused.out
    assert json.loads(client.get(f"{SPIDER}:paused"))["by"]
    assert "already paused" in cli("pause", SPIDER, "--redis-url", redis_url).out
    view = json.loads(cli("status", SPIDER, "--json", "--redis-url", redis_url).out)
    assert view["spiders"][0]["paused"] is True
    resumed = cli("resume", SPIDER, "--redis-url", redis_url)
    assert resumed.code == 0 and "resumed site" in resumed.out
    assert client.exists(f"{SPIDER}:paused") == 0
    assert "was not paused" in cli("resume", SPIDER, "--redis-url", redis_url).out
    assert_one_line_error(cli("pause", "nosuch", "--redis-url", redis_url), 1, "'nosuch'")
    down = f"redis://127.0.0.1:{free_port()}/0"
    assert_one_line_error(cli("resume", SPIDER, "--redis-url", down), 1, "cannot reach Redis")


def test_purge_asks_then_removes_every_key_of_the_spider(
    site, redis_url: str, start_worker
) -> None:
    site.pages = 12
    assert start_worker(site.url, crawl_settings(redis_url)).wait() == 0
    client = redis.Redis.from_url(redis_url)
    client.set("other:frontier", "kept")  # another crawl's key
    client.set("site2:paused", "kept")  # a spider whose name starts the same
    keys = set(client.scan_iter(match="site:*"))
    assert {b"site:frontier", b"site:stats", b"site:dupefilter"} <= keys

    declined = cli("purge", SPIDER, "--redis-url", redis_url, stdin="n\n")
    assert declined.code == 1 and "aborted" in declined.err
    assert set(client.scan_iter(match="site:*")) == keys
    no_answer = cli("purge", SPIDER, "--redis-url", redis_url)  # stdin at EOF
    assert no_answer.code == 1

    done = cli("purge", SPIDER, "--redis-url", redis_url, stdin="y\n")
    assert done.code == 0, done.err
    assert f"removed {len(keys)} key(s) of site" in done.out
    assert not list(client.scan_iter(match="site:*"))
    assert client.get("other:frontier") == b"kept" and client.get("site2:paused") == b"kept"

    again = cli("purge", SPIDER, "--yes", "--redis-url", redis_url)
    assert_one_line_error(again, 1, "nothing to purge")
    assert_one_line_error(cli("status", SPIDER, "--redis-url", redis_url), 1, "no crawl named")
    assert_one_line_error(cli("purge", "s*", "--yes", "--redis-url", redis_url), 2, "not a spider")

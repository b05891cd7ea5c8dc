"""`crawlfleet politeness SPIDER` on a real redis-server: what the keys learned (written by the
real Budget and scripts on an injected clock), shown, exported as JSON lines and reset — all of
it or one site's keys — and every bad input one line with nothing changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings

from crawlfleet import cli
from crawlfleet.politeness.budget import Budget, Outcome
from crawlfleet.politeness.config import PolitenessConfig


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def teach(client: redis.Redis, namespace: str = "book") -> Budget:
    """Two proxied keys of shop.test and one of other.test: four clean 2-second windows each
    (1, 2, 4 and 8/s: slow start to 16/s), then the first banned at 16/s."""
    clock = Clock()
    b = Budget(client, PolitenessConfig.from_settings(Settings({}), namespace), clock=clock)
    keys = ("shop.test@p1:3128", "shop.test@p2:3128", "other.test@p1:3128")
    for _ in range(4):  # windows of 2 s at 1, 2, 4 and 8/s
        end = clock.now + 2.01
        while clock.now < end:
            for key in keys:
                if b.acquire(key) == 0:
                    b.record(key, Outcome(ban=False, latency=0.02))
            clock.now = round(clock.now + 0.005, 6)
    b.record("shop.test@p1:3128", Outcome(ban=True, retry_after=5))
    return b


def politeness(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["politeness", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_show_export_and_reset(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    redis_client.flushdb()
    teach(redis_client)
    code, out, _ = politeness(capsys, "book", "--json", "--redis-url", redis_url)
    assert code == 0
    view = json.loads(out)
    assert view["namespace"] == "book" and view["warnings"] == []
    rows = {r["key"]: r for r in view["keys"]}
    assert set(rows) == {"shop.test@p1:3128", "shop.test@p2:3128", "other.test@p1:3128"}
    banned = rows["shop.test@p1:3128"]
    # banned at 16/s after a clean window at 8: ceiling 16, back to 8
    assert banned["ceiling"] == 16.0 and banned["learned"] == 8.0 and banned["rate"] == 8.0
    assert banned["why"] == "ban" and banned["bans"] == 1 and banned["proxy"] == "p1:3128"
    clean = rows["shop.test@p2:3128"]
    assert clean["phase"] == "growing" and clean["ceiling"] is None
    assert clean["learned"] == 8.0 and clean["rate"] == 16.0
    # the table: a header and a line per key
    code, out, _ = politeness(capsys, "book", "--redis-url", redis_url)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:3] == ["site", "proxy", "phase"] and len(lines) == 4
    # exported: one JSON object per key
    target = tmp_path / "learned.jsonl"
    code, out, _ = politeness(capsys, "book", "-o", str(target), "--redis-url", redis_url)
    assert code == 0 and "exported 3 keys" in out
    exported = [json.loads(line) for line in target.read_text().splitlines()]
    assert {e["key"] for e in exported} == set(rows)
    # one site's keys forgotten; the other site's kept
    code, out, _ = politeness(
        capsys, "book", "--reset", "--site", "shop.test", "--yes", "--redis-url", redis_url
    )
    assert code == 0 and "forgot 2 keys" in out
    code, out, _ = politeness(capsys, "book", "--json", "--redis-url", redis_url)
    assert [r["key"] for r in json.loads(out)["keys"]] == ["other.test@p1:3128"]
    # without --yes and no terminal to ask: nothing is reset
    code, _, err = politeness(capsys, "book", "--reset", "--redis-url", redis_url)
    assert code == 1 and "not reset" in err
    code, out, _ = politeness(capsys, "book", "--reset", "-y", "--redis-url", redis_url)
    assert code == 0 and "forgot 1 keys" in out
    code, out, _ = politeness(capsys, "book", "--redis-url", redis_url)
    assert "no politeness keys in namespace 'book'" in out


def test_the_namespace_the_workers_recorded_is_used(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    redis_client.flushdb()
    teach(redis_client, namespace="shared")
    redis_client.hset("book:frontier", "politeness_namespace", "shared")
    code, out, _ = politeness(capsys, "book", "--json", "--redis-url", redis_url)
    assert code == 0 and json.loads(out)["namespace"] == "shared"
    assert len(json.loads(out)["keys"]) == 3


def test_a_garbage_state_hash_is_left_out_with_a_warning(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    redis_client.flushdb()
    teach(redis_client)
    redis_client.hset("book:politeness:key:shop.test@p2:3128", "good", "lots")
    code, out, err = politeness(capsys, "book", "--json", "--redis-url", redis_url)
    assert code == 0 and len(json.loads(out)["keys"]) == 2
    assert "politeness key 'shop.test@p2:3128': field 'good'" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bo*k"], "not a spider name"),
        (["book", "--namespace", "a b"], "not a spider name"),
        (["book", "--site", "shop.test"], "--site goes with --reset"),
        (["book", "--reset", "--site", "a/b", "--yes"], "--site: not a host name"),
        (["book", "--reset", "--json"], "--reset does not go with --json or --output"),
        (["book", "-o", "/nonexistent-dir/x.jsonl"], "-o: cannot write"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    redis_url: str,
    redis_client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    redis_client.flushdb()
    teach(redis_client)
    before = sorted(redis_client.keys("book:politeness:*"))
    code, _, err = politeness(capsys, *argv, "--redis-url", redis_url)
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1
    assert sorted(redis_client.keys("book:politeness:*")) == before


def test_purge_keeps_what_the_keys_learned_and_the_next_budget_starts_from_it(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """The promise of POLITENESS_MEMORY: ``crawlfleet purge`` deletes the crawl, not what the
    sites taught its politeness keys; ``politeness --reset`` is what forgets that."""
    redis_client.flushdb()
    teach(redis_client)
    learned = {k: redis_client.dump(k) for k in redis_client.scan_iter(match="book:politeness:*")}
    assert len(learned) >= 4  # three state hashes, the index, the bans, the history
    redis_client.hset("book:frontier", "spider", "book")  # the crawl's own keys
    redis_client.zadd("book:requests", {"r1": 0})
    redis_client.hset("book:stats", "scheduler/enqueued", 1)
    code = cli.main(["purge", "book", "--yes", "--redis-url", redis_url])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.splitlines() == [
        f"removed 3 key(s) of book from {redis_url}",
        f"{len(learned)} politeness key(s) kept: what the sites taught the budget "
        "(crawlfleet politeness book --reset forgets it)",
    ]
    assert {k: redis_client.dump(k) for k in redis_client.scan_iter(match="book:*")} == learned
    # a new crawl's budget starts at what the key learned, not at POLITENESS_RATE (1/s)
    fresh = Budget(redis_client, PolitenessConfig.from_settings(Settings({}), "book"))
    assert fresh.state("shop.test@p2:3128").rate == 16.0
    # nothing of the crawl left: said in one line, which names what is kept
    code = cli.main(["purge", "book", "--yes", "--redis-url", redis_url])
    _, err = capsys.readouterr()
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert f"(nothing to purge; {len(learned)} politeness key(s) kept" in err
    code, _, _ = politeness(capsys, "book", "--reset", "--yes", "--redis-url", redis_url)
    assert code == 0
    code = cli.main(["purge", "book", "--yes", "--redis-url", redis_url])
    _, err = capsys.readouterr()
    assert code == 1 and err.strip().endswith("(nothing to purge)")

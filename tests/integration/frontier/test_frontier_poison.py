"""Poison entries against a real redis-server and a real crawl (issue 21, items 1 and 3): every
entry a worker cannot use is a dead letter with its reason, and the crawl finishes."""

from __future__ import annotations

import base64
import json

import redis
from scrapy import Request, Spider
from support.crawl import Site, frontier_settings

from crawlfleet import cli
from crawlfleet.frontier.leases import Lease, failed_entry
from crawlfleet.frontier.serialization import RequestCodec

DEEP = "[" * 3000 + "]" * 3000


def test_a_crawl_dead_letters_poison_and_finishes(site: Site, redis_url: str, start_worker) -> None:
    client = redis.Redis.from_url(redis_url)
    base = site.url
    poison = {  # queue entry -> what its dead letter says
        f'{{"url":"{base}/p/1","encoding":"nosuch","dont_filter":true}}': "'encoding'",
        f'{{"url":"{base}/p/2","_class":"this.s","dont_filter":true}}': "'_class' 'this.s'",
        f'{{"url":"{base}/p/3","callback":"__init__","dont_filter":true}}': "'__init__'",
        f'{{"url":"{base}/p/4","callback":"from_crawler","dont_filter":true}}': "from_crawler",
        '{"url":"file:///etc/hostname","dont_filter":true}': "SCHEDULER_URL_SCHEMES",
        f'{{"url":"{base}/p/5","meta":{{"x":{DEEP}}},"dont_filter":true}}': "nested deeper",
    }
    # PriorityQueue members carry a 16-digit sequence prefix (what ZADD in the issue wrote)
    client.zadd("site:requests", {f"{i:016x}{e}": 0 for i, e in enumerate(poison, 1)})
    starts = {
        f'{{"url":"{base}/p/6","meta":{{"x":{DEEP}}}}}': "nested deeper",
        "file:///etc/hostname": "SCHEDULER_URL_SCHEMES",
        "data:text/plain,hello": "SCHEDULER_URL_SCHEMES",
        "ftp://127.0.0.1/x": "SCHEDULER_URL_SCHEMES",
        f'{{"url":"{base}/p/7","callback":"_private"}}': "callback",
    }
    client.rpush("site:start_urls", *starts, f"{base}/p/0")

    worker = start_worker(site.url, frontier_settings(redis_url))
    assert worker.wait() == 0
    summary = worker.summary()
    assert summary["reason"] == "finished"
    assert site.crawled() == site.expected()  # from the good start URL
    assert not any(p.startswith("/etc") for p in worker.parsed())

    dead = [json.loads(e) for e in client.lrange("site:deadletter", 0, -1)]
    by_entry = {base64.b64decode(d["entry"]).decode(): d for d in dead}
    assert len(dead) == len(poison) + len(starts)
    for raw, needle in poison.items():
        assert by_entry[raw]["source"] == "queue" and needle in by_entry[raw]["reason"], raw[:80]
    for raw, needle in starts.items():
        assert by_entry[raw]["source"] == "start_urls" and needle in by_entry[raw]["reason"]
    assert all("\n" not in d["reason"] for d in dead)
    assert summary["stats"]["scheduler/deadletter"] == len(dead)
    assert int(client.hget("site:stats", "scheduler/deadletter") or 0) == len(dead)
    # every lease settled, nothing left to hang the next worker
    assert not list(client.scan_iter("site:leases:*"))
    assert client.exists("site:requests", "site:start_urls") == 0
    log = worker.log.read_text()
    assert "Traceback" not in log
    assert "Beautiful is better than ugly" not in log  # `this` was never imported


class SiteSpider(Spider):
    name = "site"


def test_requeue_failed_dead_letters_what_it_cannot_use(redis_url: str, capsys) -> None:
    client = redis.Redis.from_url(redis_url)
    client.hset(
        "site:frontier",
        mapping={
            "queue_key": "site:requests",
            "queue_class": "crawlfleet.frontier.queues.PriorityQueue",
        },
    )
    codec = RequestCodec(SiteSpider(), "msgpack")
    good = Request("http://127.0.0.1:9/good", priority=3)
    lease = Lease("1", codec.encode(good), good, failure="ConnectionRefusedError: refused")
    deep_payload = base64.b64encode(f'{{"url":"http://h/","meta":{DEEP}}}'.encode()).decode()
    bad = [
        '{"payload": ' + DEEP + "}",  # the failed entry itself nested 3,000 levels
        json.dumps({"payload": deep_payload, "priority": 0}),  # its request nested too deep
        '{"payload": "' + base64.b64encode(lease.payload).decode() + '", "priority": 1e400}',
        json.dumps({"payload": base64.b64encode(lease.payload).decode(), "priority": 2**60}),
        "[1, 2]",
    ]
    client.rpush("site:failed", *bad, failed_entry(lease, "w1"))
    for _ in range(2):  # a second run finds nothing left: nothing blocks the list
        assert cli.main(["requeue-failed", "site", "--redis-url", redis_url]) == 0
    out = capsys.readouterr().out
    assert "requeued 1 failed request(s)" in out and f"{len(bad)} unusable" in out
    assert client.llen("site:failed") == 0
    dead = [json.loads(e) for e in client.lrange("site:deadletter", 0, -1)]
    assert len(dead) == len(bad) and {d["source"] for d in dead} == {"failed"}
    assert all(d["reason"].startswith("unusable failed entry") for d in dead)
    (member,) = client.zrange("site:requests", 0, -1)
    assert codec.decode(member[16:]).url == good.url

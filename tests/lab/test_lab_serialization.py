"""Serialization is data: a request written to the hub by one worker is read back, field for field,
by another worker and by a different Python (this machine's), even when the writer's clock is
hours off. Nothing about the writer's process, clock or interpreter travels with the request."""

from __future__ import annotations

import base64
import shlex

import pytest
from labchecks import install_faketime
from labcrawl import LabCrawl
from labhosts import Lab
from scrapy import Request

from bookcrawler.spiders.book import BookSpider
from crawlfleet.frontier.serialization import RequestCodec

pytestmark = pytest.mark.lab

KEY = "crawlfleet:test:serialization"
# The writer's clock, three hours ahead (libfaketime, Debian package faketime).
SKEW = "+3h"
WRITE = f"""
import base64, json, os, platform, time
from scrapy import Request
from bookcrawler.spiders.book import BookSpider
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.hub.connect import get_redis
spider = BookSpider()
request = Request(
    "http://web:8000/api/book/1234567/?q=caf%C3%A9",
    callback=spider.parse_detail,
    method="POST",
    body=b"\\x00binary\\xff",
    priority=7,
    headers={{"X-Trace": "b", "Accept-Language": "de"}},
    cookies={{"session": "s1"}},
    meta={{"depth": 3, "nested": {{"list": [1, 2.5, None, "ü"]}}, "written_at": time.time()}},
    cb_kwargs={{"first": False}},
    dont_filter=True,
)
payload = RequestCodec(spider).encode(request)
client = get_redis(os.environ["REDIS_URL"])
client.set({KEY!r}, payload, ex=600)
print(json.dumps({{"clock": time.time(), "python": platform.python_version(),
                  "payload": base64.b64encode(payload).decode()}}))
"""
READ = f"""
import json, os, platform, time
from bookcrawler.spiders.book import BookSpider
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.hub.connect import get_redis
client = get_redis(os.environ["REDIS_URL"])
request = RequestCodec(BookSpider()).decode(client.get({KEY!r}))
client.delete({KEY!r})
print(json.dumps({{
    "clock": time.time(), "python": platform.python_version(),
    "url": request.url, "method": request.method, "body": request.body.hex(),
    "callback": request.callback.__name__, "priority": request.priority,
    "headers": {{k.decode(): v[0].decode() for k, v in request.headers.items()}},
    "cookies": request.cookies, "cb_kwargs": request.cb_kwargs,
    "dont_filter": request.dont_filter,
    "meta": {{k: request.meta[k] for k in ("depth", "nested", "written_at")}},
}}))
"""


def fields(request: Request) -> dict[str, object]:
    return {
        "url": request.url,
        "method": request.method,
        "body": request.body.hex(),
        "callback": request.callback.__name__ if request.callback else None,
        "priority": request.priority,
        "headers": {k.decode(): v[0].decode() for k, v in request.headers.items()},
        "cookies": request.cookies,
        "cb_kwargs": request.cb_kwargs,
        "dont_filter": request.dont_filter,
    }


def test_a_request_written_by_one_worker_is_read_by_another_and_by_another_python(
    lab: Lab,
) -> None:
    crawl = LabCrawl()
    # The writer runs under libfaketime: its clock is hours ahead of the reader's.
    install_faketime(crawl, "b")
    written = crawl.worker_python(WRITE, host="b", wrapper=f"faketime -f {shlex.quote(SKEW)}")
    read = crawl.worker_python(READ, host="c")

    hours_ahead = (written["clock"] - read["clock"]) / 3600
    assert 2.9 < hours_ahead < 3.1, hours_ahead
    assert read["meta"]["written_at"] > read["clock"] + 2.9 * 3600
    assert read == {
        "clock": read["clock"],
        "python": read["python"],
        "url": "http://web:8000/api/book/1234567/?q=caf%C3%A9",
        "method": "POST",
        "body": b"\x00binary\xff".hex(),
        "callback": "parse_detail",
        "priority": 7,
        "headers": {"X-Trace": "b", "Accept-Language": "de"},
        "cookies": {"session": "s1"},
        "cb_kwargs": {"first": False},
        "dont_filter": True,
        "meta": {
            "depth": 3,
            "nested": {"list": [1, 2.5, None, "ü"]},
            "written_at": read["meta"]["written_at"],
        },
    }
    # The same bytes on this machine's Python (a different build than the hosts' Debian one).
    payload = base64.b64decode(written["payload"])
    assert payload[:1] != b"\x80", "a pickle"
    here = RequestCodec(BookSpider()).decode(payload)
    assert fields(here) == {k: v for k, v in read.items() if k in fields(here)}
    assert here.meta["nested"] == {"list": [1, 2.5, None, "ü"]}

"""Frontier pieces without servers: serialization, settings validation, start URL entries, taps."""

from __future__ import annotations

import json

import msgpack
import pytest
from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.http import FormRequest
from scrapy.settings import Settings
from twisted.python.failure import Failure

from crawlfleet.frontier.config import SERIALIZER_NAMES, FrontierConfig, FrontierConfigError
from crawlfleet.frontier.leases import FailureTap, Lease, unwrap
from crawlfleet.frontier.serialization import (
    SERIALIZERS,
    DecodeError,
    EncodeError,
    RequestCodec,
    loads,
)
from crawlfleet.frontier.startfeed import StartEntryError, request_from_entry
from crawlfleet.hub.connect import redis_params
from crawlfleet.hub.errors import RedisConfigError


class BookSpider(Spider):
    name = "book"

    def parse_detail(self, response: object) -> None:
        pass

    def on_error(self, failure: object) -> None:
        pass


@pytest.fixture
def spider() -> BookSpider:
    return BookSpider()


@pytest.mark.parametrize("fmt", ["msgpack", "json"])
def test_request_round_trips_byte_exact(spider: BookSpider, fmt: str) -> None:
    codec = RequestCodec(spider, fmt)
    body = bytes(range(256))
    request = Request(
        "https://example.test/book/1?q=%E2%9C%93",
        method="POST",
        body=body,
        headers={"X-Bin": b"\xff\x00raw", "Accept": ["a/b", "c/d"]},
        meta={"depth": 3, "raw": b"\x00\x01", "nested": {"k": [1, 2.5, None, True]}},
        cb_kwargs={"page": 7},
        priority=-4,
        dont_filter=True,
        callback=spider.parse_detail,
        errback=spider.on_error,
        flags=["x"],
    )
    back = codec.decode(codec.encode(request))
    assert back.url == request.url and back.method == "POST" and back.body == body
    assert back.headers.getlist("X-Bin") == [b"\xff\x00raw"]
    assert back.headers.getlist("Accept") == [b"a/b", b"c/d"]
    assert back.meta == request.meta and back.cb_kwargs == {"page": 7}
    assert back.priority == -4 and back.dont_filter and back.flags == ["x"]
    assert back.callback == spider.parse_detail and back.errback == spider.on_error


def test_subclass_and_cross_format_decoding(spider: BookSpider) -> None:
    request = FormRequest("https://example.test/login", formdata={"u": "a"})
    payload = RequestCodec(spider, "json").encode(request)
    assert payload.startswith(b"{")
    back = RequestCodec(spider, "msgpack").decode(payload)  # either format is readable
    assert isinstance(back, FormRequest) and back.body == request.body


def test_encode_errors_are_one_line(spider: BookSpider) -> None:
    codec = RequestCodec(spider, "msgpack")
    with pytest.raises(EncodeError) as excinfo:
        codec.encode(Request("https://example.test/", callback=lambda r: None))
    assert "\n" not in str(excinfo.value)
    with pytest.raises(EncodeError):
        codec.encode(Request("https://example.test/", meta={"obj": object()}))
    with pytest.raises(EncodeError):
        RequestCodec(spider, "json").encode(Request("https://example.test/", meta={"o": {1, 2}}))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "empty"),
        (b"\xc1\xc1garbage", "undecodable"),
        (b"{not json", "undecodable"),
        (msgpack.packb([1, 2]), "not a request"),
        (msgpack.packb({"method": "GET"}), "no 'url'"),
        (json.dumps({"url": "https://e.test/", "_class": "os.system"}).encode(), "_class"),
        (json.dumps({"url": "https://e.test/", "callback": "nope"}).encode(), "invalid request"),
        (json.dumps({"url": "no scheme"}).encode(), "invalid request"),
    ],
)
def test_decode_errors(spider: BookSpider, payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as excinfo:
        RequestCodec(spider, "msgpack").decode(payload)
    assert reason in str(excinfo.value)
    assert "\n" not in str(excinfo.value)


def test_loads_reads_both_formats() -> None:
    assert loads(b'{"url": "x"}') == {"url": "x"}
    assert loads(msgpack.packb({"url": "x"})) == {"url": "x"}


def _config(**values: object) -> FrontierConfig:
    return FrontierConfig.from_settings(Settings(values), "book")


def test_defaults_and_keys() -> None:
    config = _config()
    assert config.queue_key == "book:requests"
    assert config.dupefilter_key == "book:dupefilter"
    assert config.start_urls_key == "book:start_urls"
    assert config.queue_class.__name__ == "PriorityQueue"
    assert config.persist is True and config.flush_on_start is False
    assert config.lease_timeout == 60 and config.heartbeat_interval == 10
    assert config.serializer == "msgpack" and config.prefetch == 8
    assert config.seen_cache == 100_000 and config.enqueue_batch is False
    assert config.start_urls_batch_size == 16
    assert config.url == "redis://127.0.0.1:6379/0"
    assert _config(REDIS_HOST="hub", REDIS_PORT=6380).url == "redis://hub:6380/0"


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"SCHEDULER_QUEUE_CLASS": "crawlfleet.frontier.queues.Nope"}, "SCHEDULER_QUEUE_CLASS"),
        ({"SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue"}, "SCHEDULER_QUEUE_CLASS"),
        ({"SCHEDULER_QUEUE_CLASS": "collections.OrderedDict"}, "SCHEDULER_QUEUE_CLASS"),
        ({"SCHEDULER_SERIALIZER": "pickle"}, "SCHEDULER_SERIALIZER"),
        ({"SCHEDULER_SERIALIZER": "scrapy_redis.picklecompat"}, "SCHEDULER_SERIALIZER"),
        ({"SCHEDULER_LEASE_TIMEOUT": 0}, "SCHEDULER_LEASE_TIMEOUT"),
        ({"SCHEDULER_LEASE_TIMEOUT": "soon"}, "SCHEDULER_LEASE_TIMEOUT"),
        ({"SCHEDULER_HEARTBEAT_INTERVAL": 30}, "SCHEDULER_HEARTBEAT_INTERVAL"),
        ({"SCHEDULER_IDLE_BEFORE_CLOSE": -1}, "SCHEDULER_IDLE_BEFORE_CLOSE"),
        ({"SCHEDULER_PREFETCH": 0}, "SCHEDULER_PREFETCH"),
        ({"SCHEDULER_PREFETCH": 2.5}, "SCHEDULER_PREFETCH"),
        ({"SCHEDULER_QUEUE_KEY": "%(nope)s:q"}, "SCHEDULER_QUEUE_KEY"),
        ({"REDIS_START_URLS_BATCH_SIZE": -3}, "REDIS_START_URLS_BATCH_SIZE"),
        ({"SCHEDULER_SEEN_CACHE": -1}, "SCHEDULER_SEEN_CACHE"),
        ({"SCHEDULER_SEEN_CACHE": "lots"}, "SCHEDULER_SEEN_CACHE"),
    ],
)
def test_bad_settings_name_the_setting(settings: dict[str, object], named: str) -> None:
    with pytest.raises(FrontierConfigError) as excinfo:
        _config(**settings)
    message = str(excinfo.value)
    assert message.startswith(named) or named in message
    assert "\n" not in message


def test_redis_params_merge_and_validate() -> None:
    params = redis_params(Settings({"REDIS_PARAMS": {"socket_timeout": 3}}))
    assert params["socket_timeout"] == 3 and params["socket_connect_timeout"] == 3  # clamped
    assert "retry_on_timeout" not in params  # a call never blocks longer than socket_timeout
    with pytest.raises(RedisConfigError, match="REDIS_PARAMS"):
        redis_params(Settings({"REDIS_PARAMS": "timeout=3"}))
    with pytest.raises(RedisConfigError, match="socket_timeout"):
        redis_params(Settings({"REDIS_PARAMS": {"socket_timeout": None}}))


def test_start_entries(spider: BookSpider) -> None:
    plain = request_from_entry(b"  https://example.test/a \n", spider)
    assert plain.url == "https://example.test/a" and not plain.dont_filter
    entry = {
        "url": "https://example.test/b",
        "meta": {"k": 1},
        "method": "POST",
        "body": "x=1",
        "headers": {"X-A": "1"},
        "priority": 5,
        "callback": "parse_detail",
    }
    made = request_from_entry(json.dumps(entry).encode(), spider)
    assert made.method == "POST" and made.body == b"x=1" and made.meta["k"] == 1
    assert made.headers["X-A"] == b"1" and made.priority == 5
    assert made.callback == spider.parse_detail


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe", "UTF-8"),
        (b"{broken", "JSON"),
        (b'{"meta": {}}', "'url'"),
        (b'{"url": "https://e.test/", "meta": []}', "'meta'"),
        (b'{"url": "https://e.test/", "color": 1}', "unknown field"),
        (b'{"url": "https://e.test/", "callback": "nope"}', "callback"),
        (b"not a url", "invalid"),
    ],
)
def test_bad_start_entries(spider: BookSpider, raw: bytes, reason: str) -> None:
    with pytest.raises(StartEntryError, match=reason):
        request_from_entry(raw, spider)


def test_make_request_from_data_is_used(spider: BookSpider) -> None:
    class RedisLike(BookSpider):
        def make_request_from_data(self, data: bytes) -> Request:
            return Request("https://example.test/" + data.decode())

    assert request_from_entry(b"xyz", RedisLike()).url == "https://example.test/xyz"


def test_failure_tap_records_final_failures_only(spider: BookSpider) -> None:
    lease = Lease("1", b"", Request("https://example.test/"))
    tap = FailureTap(lease, None)
    failure = Failure(ConnectionRefusedError("refused"))
    assert tap(failure) is failure  # no errback: the failure goes on to Scrapy's logging
    assert lease.failure is not None and "ConnectionRefusedError" in lease.failure
    dropped = Lease("2", b"", None)
    FailureTap(dropped, None)(Failure(IgnoreRequest("offsite")))
    assert dropped.failure is None
    seen: list[object] = []
    request = Request("https://example.test/", errback=seen.append)
    request.errback = FailureTap(Lease("3", b"", request), request.errback)
    request.errback(failure)
    assert seen == [failure]
    assert unwrap(request).errback == seen.append


def test_the_serializer_names_the_config_accepts_are_the_codecs_that_exist() -> None:
    # frontier.config names them (it may not import serialization: that imports config)
    assert sorted(SERIALIZER_NAMES) == sorted(SERIALIZERS)
    with pytest.raises(FrontierConfigError, match=r"SCHEDULER_SERIALIZER must be one of json, "):
        FrontierConfig.from_settings(Settings({"SCHEDULER_SERIALIZER": "pickle"}), "s")

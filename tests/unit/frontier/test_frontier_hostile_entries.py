"""Hostile queue and start-URL entries (issue 21, items 1 and 3): each is a one-line DecodeError or
StartEntryError — never another exception, never an import or a call of what the entry names."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import msgpack
import pytest
from scrapy import Request, Spider
from scrapy.http import FormRequest, JsonRequest
from scrapy.settings import Settings
from scrapy.spiders import CrawlSpider
from scrapy.utils.test import get_crawler

from crawlfleet.frontier.config import FrontierConfig, FrontierConfigError
from crawlfleet.frontier.serialization import (
    MAX_DEPTH,
    DecodeError,
    EncodeError,
    EntryPolicy,
    RequestCodec,
    loads,
    parse_json,
)
from crawlfleet.frontier.startfeed import StartEntryError, request_from_entry

URL = "http://127.0.0.1:28100/p/1"


class ProjectBase(Spider):
    def parse_shared(self, response: object) -> None:
        pass


class AdvSpider(ProjectBase):
    name = "adv"

    def parse_detail(self, response: object) -> None:
        pass

    def start(self) -> Any:  # an override of Scrapy's interface is still not a callback
        return iter(())

    def _private(self, response: object) -> None:
        pass

    @staticmethod
    def static_cb(response: object) -> None:
        pass


class Rules(CrawlSpider):
    name = "rules"


class SignedRequest(Request):
    """A project's own request class (declared in SCHEDULER_REQUEST_CLASSES)."""


@pytest.fixture
def spider() -> AdvSpider:
    return AdvSpider()


@pytest.fixture
def codec(spider: AdvSpider) -> RequestCodec:
    return RequestCodec(spider, "json")


def entry(**fields: Any) -> bytes:
    return json.dumps({"url": URL, **fields}).encode()


def deep_json(levels: int) -> str:
    return "[" * levels + "]" * levels


def deep_entry(levels: int) -> bytes:
    return ('{"url":"' + URL + '","meta":{"x":' + deep_json(levels) + "}}").encode()


def assert_decode_error(codec: RequestCodec, payload: bytes, needle: str) -> str:
    with pytest.raises(DecodeError) as excinfo:
        codec.decode(payload)
    message = str(excinfo.value)
    assert needle in message, message
    assert "\n" not in message and len(message) < 400
    return message


# -- item 1: whatever the exception, a DecodeError -------------------------------------------


def test_unknown_encoding_is_a_dead_letter_reason(codec: RequestCodec) -> None:
    # issue 21 item 1: {"encoding": "nosuch"} raised LookupError out of the take path
    payload = b'{"url":"%s","encoding":"nosuch","dont_filter":true}' % URL.encode()
    assert_decode_error(codec, payload, "unknown 'encoding' 'nosuch'")


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 3000, 100_000])
def test_deep_json_entries_are_refused_before_parsing(codec: RequestCodec, levels: int) -> None:
    payload = deep_entry(levels)
    started = time.monotonic()
    assert_decode_error(codec, payload, "nested deeper than")
    assert time.monotonic() - started < 5


def test_deep_msgpack_entries_are_refused(codec: RequestCodec) -> None:
    inner: Any = []
    for _ in range(MAX_DEPTH + 5):
        inner = [inner]
    assert_decode_error(codec, msgpack.packb({"url": URL, "meta": {"x": inner}}), "deeper")
    # deeper than msgpack's own stack: its StackError is a DecodeError too
    payload = b"\x82\xa3url" + msgpack.packb(URL) + b"\xa4meta" + b"\x91" * 5000 + b"\x90"
    assert_decode_error(codec, payload, "undecodable")


def test_moderate_nesting_still_round_trips(codec: RequestCodec) -> None:
    inner: Any = 1
    for _ in range(MAX_DEPTH - 3):
        inner = [inner]
    request = Request(URL, meta={"x": inner}, cb_kwargs={"k": {"a": [1, {"b": b"\x00"}]}})
    back = codec.decode(codec.encode(request))
    assert back.meta["x"] == inner and back.cb_kwargs == {"k": {"a": [1, {"b": b"\x00"}]}}


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        (entry(meta={"__b64__": "!!not base64"}), "undecodable"),
        (entry(meta={"__map__": [[[1, [2]], 3]]}), "undecodable"),  # an unhashable key
        (entry(meta={"__map__": 5}), "undecodable"),
        (entry(priority=2**70), "64-bit"),
        (entry(priority=2**60), "'priority'"),
        (entry(priority=True), "'priority'"),
        (entry(priority=1.5), "priority"),
        (b'{"url":"%s","priority":1e400}' % URL.encode(), "out of range"),
        (b'{"url":"%s","meta":{"x":NaN}}' % URL.encode(), "NaN"),
        (entry(method="GET /x HTTP/1.1\r\nHost: evil"), "'method'"),
        (entry(method=""), "'method'"),
        (entry(headers="X-A: 1"), "'headers'"),
        (entry(headers={"X-A": {"deep": 1}}), "'headers'"),
        (entry(headers=[["X-A"]]), "'headers'"),
        (entry(meta=[1, 2]), "'meta'"),
        (entry(cookies=5), "'cookies'"),
        (entry(cb_kwargs=[1]), "'cb_kwargs'"),
        (entry(flags="x"), "'flags'"),
        (entry(body=5), "'body'"),
        (entry(dont_filter="yes"), "'dont_filter'"),
        (entry(encoding=5), "'encoding'"),
        (json.dumps({"url": ["http://h/"]}).encode(), "'url'"),
        (msgpack.packb({"url": URL, "meta": {b"k": {1: 2}}}) + b"\x00", "undecodable"),
        (msgpack.packb({"url": URL, "method": "POST", "body": 7}), "'body'"),
        (b"\x81\xa3url\xda\xff\xff", "undecodable"),  # a length past the end of the entry
        (b"\xc7\x01\x00x", "not a request"),  # an ext type, not a map
        ('{"url": "\udc80"}'.encode("utf-8", "surrogatepass"), "invalid request"),
    ],
)
def test_odd_values_are_decode_errors(codec: RequestCodec, payload: bytes, needle: str) -> None:
    assert_decode_error(codec, payload, needle)


def test_loads_and_parse_json_raise_only_decode_errors() -> None:
    for payload in (b"{" * 10_000, b"[" * 10_000, b'{"a":' + b"1" * 5000 + b"}", b"\xff" * 10):
        with pytest.raises(DecodeError):
            loads(payload)
    with pytest.raises(DecodeError, match="nested deeper"):
        parse_json('{"a": ' + deep_json(100) + "}")
    assert parse_json('{"s": "[[[[\\"]]]]", "n": 1.5}') == {"s": '[[[["]]]]', "n": 1.5}


# -- item 3: _class allow-list ---------------------------------------------------------------


def test_class_is_looked_up_never_imported(codec: RequestCodec) -> None:
    # issue 21 item 3: "_class": "this.s" imported `this` and printed the Zen of Python
    sys.modules.pop("this", None)
    assert_decode_error(codec, entry(_class="this.s"), "'_class' 'this.s'")
    assert "this" not in sys.modules
    for name in ("os.system", "builtins.eval", "scrapy.utils.misc.load_object", 5, ["x"]):
        assert_decode_error(codec, entry(_class=name), "SCHEDULER_REQUEST_CLASSES")


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("scrapy.http.request.form.FormRequest", FormRequest),
        ("scrapy.FormRequest", FormRequest),
        ("scrapy.http.JsonRequest", JsonRequest),
        ("scrapy.http.request.json_request.JsonRequest", JsonRequest),
        ("scrapy.Request", Request),
    ],
)
def test_scrapy_request_classes_are_allowed(codec: RequestCodec, name: str, cls: type) -> None:
    assert type(codec.decode(entry(_class=name))) is cls


def test_project_request_classes_come_from_the_setting(spider: AdvSpider) -> None:
    request = SignedRequest(URL, method="POST", body=b"\x00\xff")
    default = RequestCodec(spider, "msgpack")
    with pytest.raises(EncodeError, match="SCHEDULER_REQUEST_CLASSES"):
        default.encode(request)  # a worker could not decode it: refused at enqueue already
    policy = EntryPolicy.from_settings(Settings({"SCHEDULER_REQUEST_CLASSES": [SignedRequest]}))
    allowed = RequestCodec(spider, "msgpack", policy)
    back = allowed.decode(allowed.encode(request))
    assert type(back) is SignedRequest and back.body == b"\x00\xff"
    with pytest.raises(DecodeError, match="SCHEDULER_REQUEST_CLASSES"):
        default.decode(allowed.encode(request))


def test_policy_comes_from_the_spiders_crawler() -> None:
    path = f"{SignedRequest.__module__}.{SignedRequest.__name__}"
    crawler = get_crawler(
        AdvSpider,
        {"SCHEDULER_REQUEST_CLASSES": [SignedRequest], "SCHEDULER_URL_SCHEMES": "https,ftp"},
    )
    codec = RequestCodec(crawler._create_spider(), "json")
    assert path in codec.policy.request_classes
    assert codec.policy.url_schemes == ("https", "ftp")
    assert codec.decode(entry(url="ftp://h/f", _class=path)).url == "ftp://h/f"
    assert_decode_error(codec, entry(url="http://h/"), "not an https:// or ftp:// URL")


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"SCHEDULER_REQUEST_CLASSES": ["no.such.Module"]}, "SCHEDULER_REQUEST_CLASSES"),
        ({"SCHEDULER_REQUEST_CLASSES": ["collections.OrderedDict"]}, "not a scrapy Request"),
        ({"SCHEDULER_REQUEST_CLASSES": {"a": 1}}, "SCHEDULER_REQUEST_CLASSES"),
        ({"SCHEDULER_URL_SCHEMES": []}, "SCHEDULER_URL_SCHEMES"),
        ({"SCHEDULER_URL_SCHEMES": ["HTTP!"]}, "SCHEDULER_URL_SCHEMES"),
        ({"SCHEDULER_URL_SCHEMES": 5}, "SCHEDULER_URL_SCHEMES"),
    ],
)
def test_bad_allow_list_settings_name_the_setting(settings: dict[str, Any], named: str) -> None:
    with pytest.raises(FrontierConfigError, match=named) as excinfo:
        FrontierConfig.from_settings(Settings(settings), "adv")
    assert "\n" not in str(excinfo.value)


def test_config_records_the_allow_lists() -> None:
    config = FrontierConfig.from_settings(
        Settings({"SCHEDULER_REQUEST_CLASSES": "scrapy.http.FormRequest"}), "adv"
    )
    assert config.request_classes["scrapy.http.FormRequest"] is FormRequest
    assert config.url_schemes == ("http", "https")


# -- item 3: callbacks are the spider's public methods ---------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "__init__",
        "__class__",
        "_private",
        "start",
        "close",
        "closed",
        "from_crawler",
        "update_settings",
        "handles_request",
        "log",
        "logger",
        "static_cb",
        "_set_crawler",
        "nope",
        "parse_detail.__globals__",
        "",
    ],
)
def test_callbacks_other_than_public_spider_methods_are_refused(
    codec: RequestCodec, name: str
) -> None:
    for field in ("callback", "errback"):
        if name:
            assert_decode_error(codec, entry(**{field: name}), field)
        else:  # Scrapy writes no callback as null; an empty name is "no callback" too
            assert codec.decode(entry(**{field: name})).callback is None


def test_public_methods_and_parse_are_callbacks(spider: AdvSpider, codec: RequestCodec) -> None:
    for name in ("parse", "parse_detail", "parse_shared"):
        request = codec.decode(entry(callback=name, errback="parse_detail"))
        assert request.callback == getattr(spider, name)
        assert request.errback == spider.parse_detail


def test_instance_attributes_are_not_callbacks(spider: AdvSpider, codec: RequestCodec) -> None:
    spider.hook = print  # type: ignore[attr-defined]
    spider.parse_detail = print  # type: ignore[method-assign]
    assert_decode_error(codec, entry(callback="hook"), "callback")
    assert_decode_error(codec, entry(callback="parse_detail"), "callback")


def test_crawlspider_keeps_its_own_private_callbacks(codec: RequestCodec) -> None:
    rules = RequestCodec(Rules(), "msgpack")
    request = rules.decode(rules.encode(Request(URL, callback=rules.spider._callback)))
    assert request.callback == rules.spider._callback
    assert_decode_error(codec, entry(callback="_callback"), "callback")  # not a CrawlSpider


def test_private_callbacks_are_refused_at_enqueue(spider: AdvSpider, codec: RequestCodec) -> None:
    with pytest.raises(EncodeError, match="_private"):
        codec.encode(Request(URL, callback=spider._private))


# -- item 3: URL schemes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["file:///etc/hostname", "ftp://127.0.0.1/x", "data:text/plain,hi", "s3://b/k"]
)
def test_other_url_schemes_are_dead_letters(
    spider: AdvSpider, codec: RequestCodec, url: str
) -> None:
    assert_decode_error(codec, entry(url=url), "SCHEDULER_URL_SCHEMES")
    with pytest.raises(EncodeError, match="SCHEDULER_URL_SCHEMES"):
        codec.encode(Request(url))
    for raw in (url.encode(), json.dumps({"url": url}).encode()):
        with pytest.raises(StartEntryError, match="SCHEDULER_URL_SCHEMES"):
            request_from_entry(raw, spider)


def test_a_setting_can_allow_another_scheme(spider: AdvSpider) -> None:
    policy = EntryPolicy(url_schemes=("http", "https", "ftp"))
    assert request_from_entry(b"ftp://127.0.0.1/x", spider, policy).url == "ftp://127.0.0.1/x"
    codec = RequestCodec(spider, "json", policy)
    assert codec.decode(codec.encode(Request("ftp://127.0.0.1/y"))).url == "ftp://127.0.0.1/y"


def test_encode_refuses_what_no_worker_could_decode(codec: RequestCodec) -> None:
    inner: Any = []
    for _ in range(MAX_DEPTH + 1):
        inner = [inner]
    with pytest.raises(EncodeError, match="deeper"):
        codec.encode(Request(URL, meta={"x": inner}))
    with pytest.raises(EncodeError, match="not JSON-serializable"):
        codec.encode(Request(URL, meta={"x": float("nan")}))
    with pytest.raises(EncodeError, match="priority"):
        codec.encode(Request(URL, priority=2**60))


def test_binary_bodies_cookies_and_headers_still_round_trip(codec: RequestCodec) -> None:
    request = FormRequest(
        URL,
        formdata={"q": "✓"},
        cookies=[{"name": "s", "value": "1", "domain": "127.0.0.1"}],
        headers={"X-Bin": b"\xff\x00"},
        meta={"nested": {"a": [b"\x01", {"b": None}]}, 3: "int key"},
    )
    back = codec.decode(codec.encode(request))
    assert isinstance(back, FormRequest) and back.body == request.body
    assert back.cookies == request.cookies and back.headers.getlist("X-Bin") == [b"\xff\x00"]
    assert back.meta == request.meta


# -- start-URL entries -----------------------------------------------------------------------


def test_deep_start_entry_is_refused(spider: AdvSpider) -> None:
    # issue 21 item 1: a 3,000-level meta logged 226 tracebacks in 45 s and blocked the key
    raw = deep_entry(3000)
    with pytest.raises(StartEntryError, match="nested deeper") as excinfo:
        request_from_entry(raw, spider)
    assert "\n" not in str(excinfo.value)


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b'{"url": "%s", "priority": 1e400}' % URL.encode(), "out of range"),
        (b'{"url": "%s", "priority": Infinity}' % URL.encode(), "Infinity"),
        (b'{"url": "%s", "priority": NaN}' % URL.encode(), "NaN"),
        (b'{"url": "%s", "priority": 18446744073709551617}' % URL.encode(), "'priority'"),
        (b'{"url": "%s", "priority": true}' % URL.encode(), "'priority'"),
        (b'{"url": "%s", "meta": {"n": 18446744073709551617}}' % URL.encode(), "64-bit"),
        (b'{"url": "%s", "headers": {"X": {"a": 1}}}' % URL.encode(), "header"),
        (b'{"url": "%s", "callback": "__init__"}' % URL.encode(), "callback"),
        (b'{"url": "%s", "callback": "start"}' % URL.encode(), "callback"),
        (b'{"url": "%s", "callback": 5}' % URL.encode(), "callback"),
        (b'{"url": "%s", "method": "G T"}' % URL.encode(), "'method'"),
        (b'{"url": "http://h/", "encoding": "nosuch"}', "unknown field"),
        (b'{"url": "http:///nohost"}', "with a host"),
        (b'{"url": "http://h:99999/"}', "not a valid URL"),
    ],
)
def test_bad_start_entries_are_one_line(spider: AdvSpider, raw: bytes, needle: str) -> None:
    with pytest.raises(StartEntryError) as excinfo:
        request_from_entry(raw, spider)
    assert needle in str(excinfo.value) and "\n" not in str(excinfo.value), str(excinfo.value)


def test_make_request_from_data_is_checked_too(spider: AdvSpider) -> None:
    class Deep(AdvSpider):
        def make_request_from_data(self, data: bytes) -> Request:
            return Request(json.loads(data)["url"])

    class Local(AdvSpider):
        def make_request_from_data(self, data: bytes) -> Request:
            return Request("file:///etc/hostname")

    with pytest.raises(StartEntryError, match="make_request_from_data failed"):
        request_from_entry(b'{"url": ' + deep_json(100_000).encode() + b"}", Deep())
    with pytest.raises(StartEntryError, match="SCHEDULER_URL_SCHEMES"):
        request_from_entry(b"x", Local())

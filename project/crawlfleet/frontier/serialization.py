"""Requests as data: ``Request.to_dict()`` encoded as msgpack or JSON, never pickle.

Callbacks and errbacks travel by name and are looked up on the spider when decoding; bodies and
headers round-trip byte-exact. The decoder recognises either format by its first byte (a JSON
object starts with ``{``, a msgpack map never does), so workers configured with different
``SCHEDULER_SERIALIZER`` values still read each other's entries.

Queue data is data, not code (:class:`EntryPolicy`): an entry may name only Scrapy's own request
classes and those in ``SCHEDULER_REQUEST_CLASSES`` (looked up by name, never imported), only
public methods of the spider as callbacks, and only URLs whose scheme is in
``SCHEDULER_URL_SCHEMES``. Nesting is bounded (:data:`MAX_DEPTH`) before anything recursive
runs. Whatever is wrong with an entry, :meth:`RequestCodec.decode` raises only
:class:`DecodeError`, so every caller can dead-letter it and go on.
"""

from __future__ import annotations

import base64
import codecs
import json
import math
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import msgpack
from scrapy import Request, Spider
from scrapy.http import FormRequest, JsonRequest, XmlRpcRequest
from scrapy.settings import BaseSettings
from scrapy.spiders import CrawlSpider, SitemapSpider

from crawlfleet.frontier.config import (
    DEFAULT_URL_SCHEMES,
    request_classes_setting,
    url_schemes_setting,
)

# Deepest nesting of lists and maps an entry may have (meta, cb_kwargs, …); checked without
# recursion before the entry is parsed or walked.
MAX_DEPTH = 64
# Sorted-set scores are doubles: priorities beyond ±2**53 would not be stored exactly.
MAX_PRIORITY = 2**53
# Integers anywhere in an entry are signed 64-bit: what msgpack and every reader can hold, so
# an entry either serializer wrote can be stored again by the other.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
_SPACE = re.compile(r"\s")
# An HTTP method is a token (RFC 9110).
_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}")

# Scrapy's request classes by every name an entry may use for them (what ``to_dict`` writes and
# the public aliases).
SCRAPY_REQUEST_CLASSES: dict[str, type[Request]] = {
    name: cls
    for cls in (Request, FormRequest, JsonRequest, XmlRpcRequest)
    for name in (
        f"{cls.__module__}.{cls.__name__}",
        f"scrapy.http.{cls.__name__}",
        f"scrapy.{cls.__name__}",
    )
}

# Names of Scrapy's spider interface: never callbacks, even where a spider overrides them.
_SPIDER_INTERFACE = frozenset(
    {n for n in dir(Spider) if not n.startswith("_")} - {"parse"}
    | {"closed", "start_requests", "make_request_from_data"}
)
# Private methods Scrapy's generic spiders use as callbacks of their own requests.
_FRAMEWORK_CALLBACKS: dict[str, type[Spider]] = {
    "_callback": CrawlSpider,
    "_errback": CrawlSpider,
    "_parse_sitemap": SitemapSpider,
}


class DecodeError(ValueError):
    """A queue entry that cannot become a Request; the message says why (one line)."""


class EncodeError(ValueError):
    """A Request that cannot be stored as data (e.g. a lambda callback or an object in meta)."""


def one_line(exc: BaseException, limit: int = 200) -> str:
    """``Type: first line of the message``, at most ``limit`` characters."""
    lines = str(exc).splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text[:limit]


def quote(text: str | bytes, limit: int = 80) -> str:
    """A bounded, escaped rendering of untrusted text for a one-line message."""
    shown = repr(text[:limit])
    return shown + ("…" if len(text) > limit else "")


_CONTAINERS = (dict, list, tuple)
# Leaf types that need no look (bool is an int but always in range).
_PLAIN = frozenset({str, bytes, float, bool, type(None)})


def tree_problem(obj: Any, limit: int = MAX_DEPTH) -> str | None:
    """Why the lists and maps in ``obj`` cannot be stored — nested deeper than ``limit``, or an
    integer outside the signed 64-bit range — or None. Iterative: no recursion, one pass."""
    stack = [(obj, 1)] if isinstance(obj, _CONTAINERS) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return f"nested deeper than {limit} levels"
        children: Any = node
        if isinstance(node, dict):
            odd_keys = [k for k in node if type(k) is not str]  # tuples, ints (msgpack maps)
            children = [*odd_keys, *node.values()] if odd_keys else node.values()
        for child in children:
            if type(child) in _PLAIN:
                continue
            if isinstance(child, _CONTAINERS):
                stack.append((child, depth + 1))
            elif isinstance(child, int) and not INT_MIN <= child <= INT_MAX:
                return f"integer {quote(str(child), 40)} is out of the 64-bit range"
    return None


# A backslash escape (inside a string) or a character that opens/closes a string or a container.
_JSON_TOKENS = re.compile(rb'\\.|["\[\]{}]', re.DOTALL)


def _json_depth_exceeds(data: bytes, limit: int) -> bool:
    depth, in_string = 0, False
    for match in _JSON_TOKENS.finditer(data):
        token = match.group()
        if token == b'"':
            in_string = not in_string
        elif in_string or token[:1] == b"\\":
            continue
        elif token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(data: bytes | str, limit: int = MAX_DEPTH) -> Any:
    """Strict, bounded JSON: nesting at most ``limit``, no NaN/Infinity; DecodeError otherwise."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _json_depth_exceeds(raw, limit):
        raise DecodeError(f"JSON nested deeper than {limit} levels")
    try:
        return json.loads(raw, parse_float=_finite, parse_constant=_no_constant)
    except (ValueError, TypeError, RecursionError) as exc:
        raise DecodeError(one_line(exc)) from None


class Serializer(Protocol):
    def dumps(self, obj: dict[str, Any]) -> bytes: ...


class MsgpackSerializer:
    def dumps(self, obj: dict[str, Any]) -> bytes:
        try:
            return bytes(msgpack.packb(obj, use_bin_type=True))
        except (TypeError, ValueError, OverflowError) as exc:
            raise EncodeError(f"not msgpack-serializable: {exc}") from None


# JSON has no bytes and no non-string keys: both are tagged so they round-trip exactly.
_BYTES_TAG = "__b64__"
_MAP_TAG = "__map__"
# A tagged map adds two levels (the tag's list and each pair) to the one it stands for.
_JSON_DEPTH = 3 * MAX_DEPTH


def _to_json(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return {_BYTES_TAG: base64.b64encode(obj).decode("ascii")}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: _to_json(v) for k, v in obj.items()}
        return {_MAP_TAG: [[_to_json(k), _to_json(v)] for k, v in obj.items()]}
    if isinstance(obj, list | tuple):
        return [_to_json(v) for v in obj]
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    raise EncodeError(f"not JSON-serializable: {type(obj).__name__} {obj!r:.80}")


def _from_json(obj: Any) -> Any:
    if isinstance(obj, dict):
        if len(obj) == 1 and _BYTES_TAG in obj:
            return base64.b64decode(obj[_BYTES_TAG], validate=True)
        if len(obj) == 1 and _MAP_TAG in obj:
            return {_hashable(_from_json(k)): _from_json(v) for k, v in obj[_MAP_TAG]}
        return {k: _from_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_from_json(v) for v in obj]
    return obj


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


class JsonSerializer:
    def dumps(self, obj: dict[str, Any]) -> bytes:
        try:
            return json.dumps(_to_json(obj), separators=(",", ":"), allow_nan=False).encode()
        except ValueError as exc:  # NaN or infinity (EncodeError is a ValueError too)
            raise EncodeError(f"not JSON-serializable: {exc}") from None


SERIALIZERS: dict[str, Serializer] = {"msgpack": MsgpackSerializer(), "json": JsonSerializer()}


def loads(data: bytes) -> dict[str, Any]:
    """Decode an entry written by either serializer; any problem is a :class:`DecodeError`."""
    if not data:
        raise DecodeError("empty entry")
    try:
        if data[:1] == b"{":
            obj = _from_json(parse_json(data, _JSON_DEPTH))
        else:
            obj = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except DecodeError as exc:
        raise DecodeError(f"undecodable entry: {exc}") from None
    except Exception as exc:  # msgpack errors, unhashable keys, bad base64, MemoryError, …
        raise DecodeError(f"undecodable entry: {one_line(exc)}") from None
    if not isinstance(obj, dict):
        raise DecodeError(f"entry is a {type(obj).__name__}, not a request object")
    problem = tree_problem(obj)
    if problem:
        raise DecodeError(f"entry {problem}")
    return obj


def url_problem(url: str, schemes: tuple[str, ...]) -> str | None:
    """Why ``url`` cannot be crawled under ``SCHEDULER_URL_SCHEMES``, or None when it can."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    wanted = " or ".join(f"{s}://" for s in schemes)
    if parts.scheme.lower() not in schemes:
        return f"not an {wanted} URL (SCHEDULER_URL_SCHEMES)"
    if parts.scheme.lower() in ("http", "https") and not parts.hostname:
        return f"not an {wanted} URL with a host"
    if _SPACE.search(url):
        return "a URL must not contain spaces"
    return None


def priority_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a stored priority, or None."""
    if not isinstance(value, int) or isinstance(value, bool):
        return "must be an integer"
    if not -MAX_PRIORITY <= value <= MAX_PRIORITY:
        return f"must be between -2**53 and 2**53, got {quote(str(value), 40)}"
    return None


def method_problem(value: Any) -> str | None:
    """Why ``value`` cannot be an HTTP method (a token, RFC 9110), or None."""
    if not isinstance(value, str) or not _METHOD.fullmatch(value):
        return f"{quote(str(value), 40)} is not an HTTP method"
    return None


def headers_problem(headers: Any) -> str | None:
    """Why ``headers`` (a map or a list of pairs) cannot be request headers, or None."""
    pairs = headers.items() if isinstance(headers, dict) else headers
    for pair in pairs:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            return "must be a map or a list of (name, value) pairs"
        name, value = pair
        values = value if isinstance(value, list) else [value]
        if not isinstance(name, str | bytes) or not all(
            isinstance(v, str | bytes | int) and not isinstance(v, bool) for v in values
        ):
            return f"{quote(str(name), 40)} must map to a string or a list of strings"
    return None


def callback_problem(name: Any) -> str | None:
    """Why ``name`` can never be a callback (whatever the spider), or None."""
    if not isinstance(name, str) or not name.isidentifier():
        return f"{quote(str(name))} is not a method name"
    if name in _FRAMEWORK_CALLBACKS:
        return None
    if name.startswith("_") or name in _SPIDER_INTERFACE:
        return f"{quote(name)} is not a public callback method of the spider"
    return None


def spider_method(spider: Spider, name: Any) -> Callable[..., Any]:
    """The bound method ``name`` of ``spider``, if it may be a callback; DecodeError otherwise.

    Allowed: ``parse`` and public methods the spider's class or its non-Scrapy bases define
    (plus the private callbacks of Scrapy's CrawlSpider and SitemapSpider, for their subclasses).
    Nothing is called or imported to find out.
    """
    problem = callback_problem(name)
    if problem:
        raise DecodeError(problem)
    owner = next((k for k in type(spider).__mro__ if name in vars(k)), None)
    function = vars(owner).get(name) if owner is not None else None
    framework = _FRAMEWORK_CALLBACKS.get(name)
    if framework is not None:
        allowed = isinstance(spider, framework)
    else:
        allowed = owner is not None and (
            name == "parse" or owner.__module__.partition(".")[0] != "scrapy"
        )
    shadowed = name in getattr(spider, "__dict__", {})  # an instance attribute, not the method
    if allowed and isinstance(function, types.FunctionType) and not shadowed:
        method = getattr(spider, name)
        if getattr(method, "__func__", None) is function:
            return method
    raise DecodeError(f"{quote(name)} is not a public callback method of the spider")


@dataclass(frozen=True)
class EntryPolicy:
    """What a decoded entry may name: request classes and URL schemes (callbacks: the spider's)."""

    request_classes: Mapping[str, type[Request]] = field(
        default_factory=lambda: dict(SCRAPY_REQUEST_CLASSES)
    )
    url_schemes: tuple[str, ...] = DEFAULT_URL_SCHEMES

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> EntryPolicy:
        """From SCHEDULER_REQUEST_CLASSES and SCHEDULER_URL_SCHEMES (FrontierConfigError)."""
        return cls(
            {**SCRAPY_REQUEST_CLASSES, **request_classes_setting(settings)},
            url_schemes_setting(settings),
        )

    @classmethod
    def for_spider(cls, spider: Spider) -> EntryPolicy:
        """From the settings of the spider's crawler; the defaults for a spider without one."""
        crawler = getattr(spider, "crawler", None)
        return cls() if crawler is None else cls.from_settings(crawler.settings)

    def request_class(self, name: Any) -> type[Request]:
        """The class an entry's ``_class`` names, looked up by name (never imported)."""
        if name is None:
            return Request
        cls = self.request_classes.get(name) if isinstance(name, str) else None
        if cls is None:
            raise DecodeError(
                f"'_class' {quote(str(name))} is not a scrapy Request class allowed by "
                f"SCHEDULER_REQUEST_CLASSES"
            )
        return cls

    def url_problem(self, url: str) -> str | None:
        return url_problem(url, self.url_schemes)


# Request fields and the types an entry may give them (None is Scrapy's "not set").
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "url": (str,),
    "method": (str,),
    "headers": (dict, list),
    "body": (bytes, str),
    "cookies": (dict, list),
    "meta": (dict,),
    "encoding": (str,),
    "priority": (int,),
    "dont_filter": (bool,),
    "flags": (list,),
    "cb_kwargs": (dict,),
}


class RequestCodec:
    """Turns Requests into queue payloads and back, for one spider."""

    def __init__(
        self, spider: Spider, serializer: str = "msgpack", policy: EntryPolicy | None = None
    ) -> None:
        self.spider = spider
        self.serializer = SERIALIZERS[serializer]
        self.policy = policy if policy is not None else EntryPolicy.for_spider(spider)

    def encode(self, request: Request) -> bytes:
        """The payload of ``request``; EncodeError if a worker could not decode it again."""
        try:
            data = request.to_dict(spider=self.spider)
        except ValueError as exc:
            raise EncodeError(str(exc).splitlines()[0]) from None
        try:
            problem = tree_problem(data)
            if problem:
                raise DecodeError(f"request {problem}")
            self._check(data)
            for name in ("callback", "errback"):
                if data.get(name):
                    spider_method(self.spider, data[name])
        except DecodeError as exc:
            raise EncodeError(str(exc)) from None
        return self.serializer.dumps(data)

    def decode(self, payload: bytes) -> Request:
        """The Request in ``payload``; whatever is wrong with it raises :class:`DecodeError`."""
        try:
            data = loads(payload)
            self._check(data)
            return self._build(data)
        except DecodeError:
            raise
        except Exception as exc:  # whatever Scrapy's constructors raise on odd values
            raise DecodeError(f"invalid request: {one_line(exc)}") from None

    def _check(self, data: dict[str, Any]) -> None:
        """Field checks that need no spider (nesting and integers are checked by the caller)."""
        url = data.get("url")
        if not isinstance(url, str) or not url:
            raise DecodeError("entry has no 'url' string")
        problem = self.policy.url_problem(url)
        if problem:
            raise DecodeError(f"invalid request: 'url' {quote(url)} is {problem}")
        self.policy.request_class(data.get("_class"))
        for name, kinds in _FIELD_TYPES.items():
            value = data.get(name)
            if value is not None and not isinstance(value, kinds):
                raise DecodeError(
                    f"invalid request: field {name!r} is a {type(value).__name__}, "
                    f"not {' or '.join(k.__name__ for k in kinds)}"
                )
        problem = priority_problem(data.get("priority", 0))
        if problem:
            raise DecodeError(f"invalid request: 'priority' {problem}")
        method = data.get("method")
        problem = None if method is None else method_problem(method)
        if problem:
            raise DecodeError(f"invalid request: 'method' {problem}")
        headers = data.get("headers")
        problem = None if headers is None else headers_problem(headers)
        if problem:
            raise DecodeError(f"invalid request: 'headers' {problem}")
        encoding = data.get("encoding")
        if encoding is not None:
            try:
                codecs.lookup(encoding)
            except LookupError:
                raise DecodeError(
                    f"invalid request: unknown 'encoding' {quote(encoding)}"
                ) from None

    def _build(self, data: dict[str, Any]) -> Request:
        cls = self.policy.request_class(data.get("_class"))
        kwargs = {key: value for key, value in data.items() if key in cls.attributes}
        for name in ("callback", "errback"):
            if data.get(name):
                try:
                    kwargs[name] = spider_method(self.spider, data[name])
                except DecodeError as exc:
                    raise DecodeError(f"invalid request: {name} {exc}") from None
            else:
                kwargs.pop(name, None)
        request = cls(**kwargs)
        if request.url != data["url"]:  # what Scrapy made of it is what would be fetched
            problem = self.policy.url_problem(request.url)
            if problem:
                raise DecodeError(f"invalid request: 'url' {quote(request.url)} is {problem}")
        return request

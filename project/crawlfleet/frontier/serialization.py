"""Requests as data: ``Request.to_dict()`` encoded as msgpack or JSON, never pickle.

Callbacks and errbacks travel by name and are looked up on the spider when decoding; bodies and
headers round-trip byte-exact. The decoder recognises either format by its first byte (a JSON
object starts with ``{``, a msgpack map never does), so workers configured with different
``SCHEDULER_SERIALIZER`` values still read each other's entries.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Protocol

import msgpack
from scrapy import Request, Spider
from scrapy.utils.misc import load_object
from scrapy.utils.request import request_from_dict


class DecodeError(ValueError):
    """A queue entry that cannot become a Request; the message says why (one line)."""


class EncodeError(ValueError):
    """A Request that cannot be stored as data (e.g. a lambda callback or an object in meta)."""


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
            return base64.b64decode(obj[_BYTES_TAG])
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
        return json.dumps(_to_json(obj), separators=(",", ":"), allow_nan=False).encode()


SERIALIZERS: dict[str, Serializer] = {"msgpack": MsgpackSerializer(), "json": JsonSerializer()}


def loads(data: bytes) -> dict[str, Any]:
    """Decode an entry written by either serializer."""
    if not data:
        raise DecodeError("empty entry")
    try:
        if data[:1] == b"{":
            obj = _from_json(json.loads(data))
        else:
            obj = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.FormatError, msgpack.StackError) as exc:
        raise DecodeError(f"undecodable entry: {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, dict):
        raise DecodeError(f"entry is a {type(obj).__name__}, not a request object")
    return obj


class RequestCodec:
    """Turns Requests into queue payloads and back, for one spider."""

    def __init__(self, spider: Spider, serializer: str = "msgpack") -> None:
        self.spider = spider
        self.serializer = SERIALIZERS[serializer]

    def encode(self, request: Request) -> bytes:
        try:
            data = request.to_dict(spider=self.spider)
        except ValueError as exc:
            raise EncodeError(str(exc).splitlines()[0]) from None
        return self.serializer.dumps(data)

    def decode(self, payload: bytes) -> Request:
        data = loads(payload)
        url = data.get("url")
        if not isinstance(url, str) or not url:
            raise DecodeError("entry has no 'url' string")
        cls_path = data.get("_class")
        if cls_path is not None:
            # Only Request subclasses may be named: the queue is data, not code to run.
            try:
                cls = load_object(cls_path) if isinstance(cls_path, str) else None
            except (ImportError, AttributeError, ValueError, NameError):
                cls = None
            if not (isinstance(cls, type) and issubclass(cls, Request)):
                raise DecodeError(f"'_class' {cls_path!r:.80} is not a scrapy Request class")
        try:
            return request_from_dict(data, spider=self.spider)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DecodeError(f"invalid request: {message:.200}") from None

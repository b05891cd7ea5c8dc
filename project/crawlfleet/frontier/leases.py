"""A worker's side of leases: what it popped, what finished, and what failed for good.

A popped request stays in Redis (``<spider>:leases:<worker>``) until this worker acknowledges it.
The scheduler hands leased requests to the engine and watches the engine's in-progress set: a
request that has left it was fully handled (response parsed and its new requests enqueued, or its
final failure handled), so its lease is acknowledged in the next round trip. A final failure is
noticed by a :class:`FailureTap` standing in front of the request's errback.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError
from twisted.python.failure import Failure


@dataclass(eq=False)
class Lease:
    """One popped queue entry: its lease id, raw payload, and the Request decoded from it
    (``shard``: the shard it was popped from, which its acknowledgement goes to)."""

    lease_id: str
    payload: bytes
    request: Request | None = None
    failure: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    shard: int = 0


class FailureTap:
    """Errback wrapper: records a final failure on the lease, then behaves like the original.

    Retries and redirects copy the request together with this tap, so only the failure that
    reaches the spider — after the retry middleware gave up — is recorded. Deliberate drops
    (``IgnoreRequest``, e.g. offsite or robots.txt) are not failures; ``HttpError`` is.
    """

    def __init__(self, lease: Lease, original: Callable[..., Any] | None) -> None:
        self.lease = lease
        self.original = original

    def __call__(self, failure: Failure) -> Any:
        if failure.check(HttpError) or not failure.check(IgnoreRequest):
            message = failure.getErrorMessage().splitlines()[0] if failure.value else ""
            name = failure.type.__name__ if failure.type else "Failure"
            self.lease.failure = f"{name}: {message}"[:500]
        if self.original is None:
            return failure
        return self.original(failure)


def unwrap(request: Request) -> Request:
    """The request as the spider made it (without our tap), for serializing it again."""
    if isinstance(request.errback, FailureTap):
        return request.replace(errback=request.errback.original)
    return request


def failed_entry(lease: Lease, worker: str) -> str:
    """The JSON line stored in ``<spider>:failed`` (``requeue-failed`` puts ``payload`` back)."""
    request = lease.request
    return json.dumps(
        {
            "reason": lease.failure,
            "url": request.url if request is not None else None,
            "method": request.method if request is not None else None,
            "priority": request.priority if request is not None else 0,
            "payload": base64.b64encode(lease.payload).decode("ascii"),
            "worker": worker,
            "time": time.time(),
        }
    )


def dead_entry(raw: bytes, reason: str, worker: str, source: str) -> str:
    """The JSON line stored in ``<spider>:deadletter`` for an entry that cannot be used."""
    return json.dumps(
        {
            "reason": reason,
            "source": source,
            "entry": base64.b64encode(raw).decode("ascii"),
            "worker": worker,
            "time": time.time(),
        }
    )

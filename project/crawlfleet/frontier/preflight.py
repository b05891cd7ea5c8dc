"""Before a worker joins a crawl: may its Redis user write the keys the crawl writes?

An ACL that does not grant the crawl's keys (a spider the hub's ACL does not list, a
``POLITENESS_NAMESPACE`` outside it, a read-only user) used to surface as a traceback at the
first write or, for the politeness budget's keys, mid-crawl at the first request. Each key family
is tried once at start with a script that does nothing (``EVAL "return 0" 1 key``: Redis checks a
script's keys against the user's rights before it runs, and the crawler user may run scripts);
the first refused one is one line naming the user, the key and the crawl.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis

from crawlfleet.hub.urls import url_user

NOTHING = "return 0"


def refused_key(client: Any, keys: Iterable[str]) -> tuple[str, str] | None:
    """The first of ``keys`` the client's user may not write, with Redis's reason; None when it
    may write them all. Other Redis errors are raised (the caller's retry or one line)."""
    for key in dict.fromkeys(keys):
        try:
            client.eval(NOTHING, 1, key)
        except redis.exceptions.NoPermissionError as exc:
            return key, str(exc).rstrip(".")
    return None


def problem(client: Any, keys: Iterable[str], url: str, crawl: str) -> str | None:
    """One line when the user of ``url`` may not write one of the crawl's ``keys``."""
    refused = refused_key(client, keys)
    if refused is None:
        return None
    key, said = refused
    return (
        f"Redis user {url_user(url)!r} (REDIS_URL) may not write {key}, a key of crawl {crawl!r}: "
        f"{said} (the hub's ACL grants each spider of crawler_projects its keys: "
        "`crawlfleet acl render --spider …`)"
    )

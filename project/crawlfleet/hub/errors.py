"""The hub's one exception tree: every error about reaching or naming the hub's Redis.

``HubError`` is the root. ``RedisConfigError`` (also a ``ValueError``, as callers of a URL
parser expect) is configuration that cannot work — a URL, a parameter, a setting — and a
restart would not help; its message is one line naming the setting, with secrets masked.
``RedisUrlError`` is a URL that cannot be read, ``RedisAuthError`` credentials Redis refused,
``BadSpiderName`` a name that cannot name one crawl's keys.
Outages are redis-py's own ``ConnectionError``/``TimeoutError``: callers retry those.
"""

from __future__ import annotations


class HubError(Exception):
    """Something about the hub's Redis that crawlfleet reports in one line."""


class RedisConfigError(HubError, ValueError):
    """A Redis URL or parameter that cannot work; the message names it with the password masked."""


class RedisUrlError(RedisConfigError):
    """The URL itself is wrong (bad configuration, not an outage)."""


class RedisAuthError(RedisConfigError):
    """Redis refused the URL's credentials (bad configuration: a restart would not help)."""


class BadSpiderName(HubError, ValueError):
    """A name that cannot name exactly one crawl's keys (one line, quoting it shortened)."""

"""Ansible filters of the crawlfleet playbooks (ansible.cfg's filter_plugins).

``redis_login``: a Redis URL of the inventory (``crawlfleet_redis_url``) as one role's user
logs in with it - its user and password in place of the URL's, and with a
``redis(s)+sentinel://`` URL on the Sentinels as well (``sentinel_username``,
``sentinel_password``), so that each service holds its own credentials and no other's.
"""

from __future__ import annotations

import re
from urllib.parse import quote

_USERINFO = re.compile(r"^([^:/]+://)[^@/]*@")
_SENTINEL_LOGIN = ("sentinel_username", "sentinel_password")


def _quoted(text: str) -> str:
    return quote(str(text), safe="")


def redis_login(url: str, user: str, password: str) -> str:
    """``url`` logging in as ``user`` (empty or ``default``: the default user) with
    ``password``, on the Redis nodes and, for a Sentinel URL, on the Sentinels."""
    login = f"{_quoted(user) if user else ''}:{_quoted(password)}@"
    url = _USERINFO.sub(lambda m: m.group(1) + login, str(url), count=1)
    if "+sentinel://" not in url.split("?", 1)[0]:
        return url
    base, _, query = url.partition("?")
    kept = [p for p in query.split("&") if p and p.partition("=")[0] not in _SENTINEL_LOGIN]
    own = [] if user in ("", "default") else [f"sentinel_username={_quoted(user)}"]
    own.append(f"sentinel_password={_quoted(password)}")
    return f"{base}?{'&'.join(own + kept)}"


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {"redis_login": redis_login}

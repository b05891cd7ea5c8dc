"""One Redis connection pool per process, built from a URL; nothing shown ever leaks a secret.

``mask_url`` is the one function that makes a URL fit to show (logs, errors, ``status``,
``check``): it hides every credential form redis-py's URL parser accepts — ``:pw@``,
``user:pw@``, a lone ``pw@`` (redis-py sends it as a user name, so it may be a password),
``?password=`` and ``?username=``, and any query parameter it does not know to be harmless —
for ``redis://``, ``rediss://``, ``unix://``, ``redis+sentinel://`` and ``redis+cluster://``
(several ``host:port`` pairs) and the pools' ``http(s)://`` URLs alike. A URL it cannot read
with certainty (no ``scheme://``, an ``@`` after the host part, a bad IPv6 bracket) is not
echoed at all. ``redis_location`` is the scheme, host, port and database only, for
unauthenticated pages such as ``/health``. ``mask_secrets`` hides known secrets in someone
else's text (a server's reply, an exception) before it is quoted.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import redis
from redis.connection import parse_url

_clients: dict[tuple[str, tuple[tuple[str, Any], ...]], redis.Redis] = {}
_lock = threading.Lock()

SCHEMES = ("redis", "rediss", "unix")
URL_SHAPE = "redis://[:password@]host:port/db"
HIDDEN = "***"
# Query parameters redis-py (and its TLS connection) reads that carry no secret; every other
# parameter's value (password, username, ssl_password, a misspelt name…) is shown as ***.
SAFE_QUERY = frozenset(
    {
        "db",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_read_size",
        "socket_keepalive",
        "retry_on_timeout",
        "retry_on_error",
        "max_connections",
        "health_check_interval",
        "timeout",
        "protocol",
        "legacy_responses",
        "client_name",
        "ssl_cert_reqs",
        "ssl_check_hostname",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_min_version",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
    }
)


QUERY_NAMES = SAFE_QUERY | {"password", "username", "ssl_password"}


class RedisConfigError(ValueError):
    """A Redis URL or parameter that cannot work; the message names it with the password masked."""


class RedisUrlError(RedisConfigError):
    """The URL itself is wrong (bad configuration, not an outage)."""


class RedisAuthError(RedisConfigError):
    """Redis refused the URL's credentials (bad configuration: a restart would not help)."""


def _unreadable(url: str) -> str:
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme and scheme.replace("+", "").isalnum():
        return f"{scheme}://<hidden: not a valid URL>"
    return "<hidden: not a valid URL>"


def _mask_query(query: str) -> str:
    pieces = []
    for piece in query.split("&"):
        name, eq, _ = piece.partition("=")
        if not piece:
            continue
        if name in SAFE_QUERY and eq:
            pieces.append(piece)
        elif name in QUERY_NAMES:
            pieces.append(f"{name}={HIDDEN}")
        else:
            pieces.append(HIDDEN)  # an unknown name may itself be the tail of a password
    return "&".join(pieces)


def mask_url(url: str) -> str:
    """``url`` with every credential replaced by ``***``; an unreadable URL is not echoed."""
    if not isinstance(url, str):
        return "<hidden: not a valid URL>"
    try:
        parts = urlsplit(url)
    except ValueError:
        return _unreadable(url)
    if not parts.scheme or "://" not in url or not url.startswith(parts.scheme + "://"):
        return _unreadable(url)
    # An "@" past the host part means a password with "/", "?" or "#" in it cut the URL short:
    # what looks like the host or path is then part of the password.
    if "@" in parts.path or "@" in parts.query or "@" in parts.fragment:
        return _unreadable(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        userinfo = f"{user}:{HIDDEN}@" if colon else f"{HIDDEN}@"
    shown = f"{parts.scheme}://{userinfo}{hostport}{parts.path}"
    if parts.query:
        shown += "?" + _mask_query(parts.query)
    if parts.fragment:
        shown += "#" + HIDDEN  # redis-py ignores it; it may be the tail of a password with "#"
    return shown


def redis_location(url: str) -> str:
    """Where Redis is — ``scheme://host:port/db`` or the socket path — and nothing else, or ``""``.

    No user name, no query, no fragment: fit for an unauthenticated page such as ``/health``.
    """
    shown = mask_url(url)
    if "<hidden" in shown:
        return ""
    parts = urlsplit(shown)
    location = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
    return location if HIDDEN not in location else ""


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """Someone else's text (a server's reply, an exception) with every known secret masked.

    Each secret is masked as written and URL-quoted (an echoed URL or query carries it quoted).
    """
    for secret in secrets:
        if secret:
            for form in {secret, quote(secret, safe=""), quote(secret)}:
                text = text.replace(form, HIDDEN)
    return text


def url_secrets(url: str) -> tuple[str, ...]:
    """The credentials written in ``url`` (user position, password, query), raw and decoded."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ()
    found = [parts.password or "", parts.username or ""]
    for piece in parts.query.split("&"):
        name, _, value = piece.partition("=")
        if name not in SAFE_QUERY:
            found.append(value)
    return tuple(s for raw in found if raw for s in {raw, unquote(raw)} if len(s) > 1)


def has_credentials(url: str) -> bool:
    """True when redis-py would send a user name or password for ``url`` (any of its forms)."""
    try:
        return bool({"username", "password"} & parse_url(url).keys())
    except ValueError:
        return False


def url_problem(url: str) -> str | None:
    """Why redis-py cannot read ``url`` (one phrase, no secret), or None when it can."""
    if not url:
        return "is empty"
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme not in SCHEMES:
        return f"must look like {URL_SHAPE}"
    try:
        parts.port  # noqa: B018 -- raises ValueError on a port that is no number
    except ValueError:
        # Not the parser's text: it quotes the "port", which may be a cut-off password.
        return "has a port that is not a number from 0 to 65535"
    try:
        parse_url(url)
    except ValueError as exc:
        return f"is not a valid Redis URL ({mask_secrets(str(exc), url_secrets(url)).rstrip('.')})"
    unknown = [p for p in parts.query.split("&") if p and p.partition("=")[0] not in QUERY_NAMES]
    if unknown:
        return (
            f"has {len(unknown)} query parameter(s) redis-py does not read "
            "(it reads db, password, socket_timeout, ssl_* …)"
        )
    return None


def validate_url(url: str, names: str = "REDIS_URL") -> str:
    """``url`` if redis-py can read it; else ``RedisUrlError`` with one line naming ``names``."""
    problem = url_problem(url)
    if problem is None:
        return url
    if not url:
        raise RedisUrlError(f"{names} is empty: it must look like {URL_SHAPE}")
    if problem.startswith("must"):
        raise RedisUrlError(f"{names} {problem}, got {mask_url(url)!r}")
    raise RedisUrlError(f"invalid {names}: {mask_url(url)!r} {problem}")


def get_redis(url: str, **params: Any) -> redis.Redis:
    """Return the process-wide client for ``url`` (one connection pool per URL and parameters)."""
    validate_url(url)
    key = (url, tuple(sorted(params.items())))
    with _lock:
        client = _clients.get(key)
        if client is None:
            try:
                client = redis.Redis.from_url(url, **params)
            except (TypeError, ValueError) as exc:
                reason = mask_secrets(str(exc), url_secrets(url))
                raise RedisUrlError(f"invalid REDIS_URL {mask_url(url)!r}: {reason}") from None
            _clients[key] = client
        return client


def check_connection(client: redis.Redis, url: str) -> None:
    """Ping Redis once; on failure raise a one-line ``RedisConfigError`` naming the masked URL.

    ``RedisAuthError`` when Redis refuses the credentials (configuration), the base class when
    it cannot be reached (an outage).
    """
    try:
        client.ping()
    except redis.AuthenticationError:
        raise RedisAuthError(
            f"Redis at {mask_url(url)} rejected the password (REDIS_URL)"
        ) from None
    except redis.ResponseError as exc:
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise RedisAuthError(
                f"Redis at {mask_url(url)} needs a valid password (REDIS_URL): {exc}"
            ) from None
        raise
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise RedisConfigError(
            f"cannot reach Redis at {mask_url(url)} (REDIS_URL): {exc}"
        ) from None

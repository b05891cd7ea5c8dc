"""One Redis connection pool per process, built from a URL; nothing shown ever leaks a secret.

``mask_url`` is the one function that makes a URL fit to show (logs, errors, ``status``,
``check``): it hides every credential form redis-py's URL parser accepts — ``:pw@``,
``user:pw@``, a lone ``pw@`` (redis-py sends it as a user name, so it may be a password),
``?password=`` and ``?username=``, and any query parameter it does not know to be harmless —
for ``redis://``, ``rediss://``, ``unix://``, ``redis(s)+sentinel://`` and ``redis+cluster://``
(several ``host:port`` pairs) and the pools' ``http(s)://`` URLs alike. A URL it cannot read
with certainty (no ``scheme://``, an ``@`` after the host part, a bad IPv6 bracket) is not
echoed at all. ``redis_location`` is the scheme, host, port and database only, for
unauthenticated pages such as ``/health``. ``mask_secrets`` hides known secrets in someone
else's text (a server's reply, an exception) before it is quoted.

``redis+sentinel://[:password@]host:port[,host:port…]/<service>[/<db>]`` is read by
``parse_sentinel_url`` (the one parser of that form): the password is the primary's, a
Sentinel's own password is the ``sentinel_password`` query parameter (``sentinel_username``
its ACL user's name, with the Sentinels' ACL users). ``get_redis`` and
``get_async_redis`` then build a client whose pool asks the Sentinels for the current primary
on every new connection, so a client follows a failover without a restart (a connection to a
demoted primary answers READONLY, which redis-py turns into a reconnect).
``rediss+sentinel://`` is the same over TLS, to the Sentinels and to the primary or replica they
name alike: it takes rediss://'s ``ssl_*`` options (``ssl_ca_certs``, ``ssl_certfile`` …) and
verifies as rediss:// does; ``redis+sentinel://`` refuses them.

``redis+cluster://[:password@|user:password@]host:port[,host:port…]/0`` is a Redis Cluster, read
by ``parse_cluster_url``: the hosts are start-up nodes (any of them answering is enough), the
database is 0 (the only one a cluster has); ``get_redis`` and ``get_async_redis`` build redis-py's
``RedisCluster`` clients, which route every command by its key's slot and follow failovers and
resharding (MOVED). ``rediss+cluster://`` is the same over TLS with rediss://'s ``ssl_*`` options.
On a cluster every key of one crawl carries the hash tag ``{<spider>}`` (``SpiderKeys``), so one
crawl lives in one slot.

``rediss://host:port/db?ssl_ca_certs=<CA file>`` is Redis over TLS: the clients always verify
the server's certificate against that CA (or the system's) and its name against the URL's host
(``ssl_cert_reqs=required``, ``ssl_check_hostname``), unless the URL itself says otherwise. A
certificate that does not verify is one line naming the host and the cause (``tls_problem``);
so is a command the URL's ACL user may not run (``permission_problem``).
"""

from __future__ import annotations

import re
import ssl
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, quote, unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.asyncio.sentinel as aiosentinel
import redis.backoff
import redis.cluster
import redis.retry
import redis.sentinel
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.retry import Retry as AsyncRetry
from redis.connection import parse_url

_clients: dict[tuple[str, tuple[tuple[str, Any], ...]], redis.Redis] = {}
_lock = threading.Lock()

SENTINEL_SCHEME = "redis+sentinel"
TLS_SENTINEL_SCHEME = "rediss+sentinel"
SENTINEL_SCHEMES = (SENTINEL_SCHEME, TLS_SENTINEL_SCHEME)
CLUSTER_SCHEME = "redis+cluster"
TLS_CLUSTER_SCHEME = "rediss+cluster"
CLUSTER_SCHEMES = (CLUSTER_SCHEME, TLS_CLUSTER_SCHEME)
SCHEMES = ("redis", "rediss", "unix", *SENTINEL_SCHEMES, *CLUSTER_SCHEMES)
SENTINEL_SHAPE = "redis(s)+sentinel://[:password@]host:port[,host:port…]/service/db"
CLUSTER_SHAPE = "redis(s)+cluster://[:password@]host:port[,host:port…]/0"
URL_SHAPE = f"redis://[:password@]host:port/db, {SENTINEL_SHAPE} or {CLUSTER_SHAPE}"
SENTINEL_PORT = 26379
REDIS_PORT = 6379
_SERVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
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


QUERY_NAMES = SAFE_QUERY | {
    "password",
    "username",
    "ssl_password",
    "sentinel_username",
    "sentinel_password",
}


class RedisConfigError(ValueError):
    """A Redis URL or parameter that cannot work; the message names it with the password masked."""


class RedisUrlError(RedisConfigError):
    """The URL itself is wrong (bad configuration, not an outage)."""


class RedisAuthError(RedisConfigError):
    """Redis refused the URL's credentials (bad configuration: a restart would not help)."""


def is_sentinel_url(url: str) -> bool:
    """True for a ``redis+sentinel://`` or ``rediss+sentinel://`` (TLS) URL."""
    return url.startswith(tuple(scheme + "://" for scheme in SENTINEL_SCHEMES))


def is_cluster_url(url: str) -> bool:
    """True for a ``redis+cluster://`` or ``rediss+cluster://`` (TLS) URL."""
    return isinstance(url, str) and url.startswith(
        tuple(scheme + "://" for scheme in CLUSTER_SCHEMES)
    )


def is_cluster_client(client: object) -> bool:
    """True for a Redis Cluster client (redis-py's ``RedisCluster``, sync or asyncio, or one of
    its pipelines): the one test of whether key names carry their hash tags."""
    return isinstance(client, (redis.cluster.RedisCluster, aiocluster.RedisCluster))


def _split(url: str) -> SplitResult:
    """``urlsplit``, except for a Sentinel or cluster URL's host list (an IPv6 ``[…]`` past its
    start)."""
    if not is_sentinel_url(url) and not is_cluster_url(url):
        return urlsplit(url)
    scheme, _, rest = url.partition("://")
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    return SplitResult(scheme, netloc, slash + path, query, fragment)


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
        parts = _split(url)
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
    parts = _split(shown)
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
        parts = _split(url)
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
        if is_sentinel_url(url) or is_cluster_url(url):
            target = parse_cluster_url(url) if is_cluster_url(url) else parse_sentinel_url(url)
            return bool(target.username or target.password)
        return bool({"username", "password"} & parse_url(url).keys())
    except ValueError:
        return False


@dataclass(frozen=True)
class SentinelTarget:
    """What a ``redis(s)+sentinel://`` URL names: the Sentinels, the service, how to log in."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None  # the Sentinels' ACL user (default: their default user)
    sentinel_password: str | None = None
    tls: bool = False  # rediss+sentinel://: TLS to the Sentinels and to the nodes they name
    # the other query parameters, converted as redis-py converts them (socket_timeout → float…)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """The Sentinel list as written (``host:port,host:port``), no credential."""
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)


def _host_address(piece: str, what: str, default_port: int) -> tuple[str, int]:
    """``(host, port)`` of one ``host[:port]`` of a host list (``what``: its kind, for errors)."""
    if piece.startswith("["):
        host, bracket, rest = piece[1:].partition("]")
        if not bracket or not host or (rest and not rest.startswith(":")):
            raise ValueError(f"has a {what} address with a bad IPv6 bracket")
        port_text = rest[1:] if rest else ""
        valid_host = all(c in "0123456789abcdefABCDEF:." for c in host)
    else:
        host, _, port_text = piece.partition(":")
        valid_host = bool(re.fullmatch(r"[A-Za-z0-9_.-]+", host))
    if not host:
        raise ValueError(f"has an empty host in its {what} list (host:port[,host:port…])")
    if not valid_host:
        raise ValueError(f"has a {what} host that is not a host name or IP address")
    if not port_text:
        return host, default_port
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"has a {what} port that is not a number from 1 to 65535")
    return host, int(port_text)


def parse_sentinel_url(url: str) -> SentinelTarget:
    """Read ``redis(s)+sentinel://[:password@]host:port[,host:port…]/<service>[/<db>][?…]``.

    ``ValueError`` with one phrase that quotes nothing of the URL when it cannot be read. The
    database defaults to 0, a Sentinel's port to 26379; ``?sentinel_password=`` is the
    Sentinels' own password (``?sentinel_username=`` their ACL user's name), the other query
    parameters are redis-py's (``socket_timeout`` …, and with ``rediss+sentinel://`` the
    ``ssl_*`` ones).
    """
    if not is_sentinel_url(url):
        raise ValueError(f"must look like {SENTINEL_SHAPE}")
    parts = _split(url)
    tls = parts.scheme == TLS_SENTINEL_SCHEME
    username, password, sentinels = _login_and_hosts(parts, "Sentinel", SENTINEL_PORT)
    segments = parts.path.split("/")[1:] if parts.path else []
    if segments and segments[-1] == "":
        segments.pop()  # a trailing slash
    if not segments or not segments[0]:
        raise ValueError("names no service: the path must be /<service>/<db>")
    if len(segments) > 2:
        raise ValueError("has more than /<service>/<db> in its path")
    service = unquote(segments[0])
    if not _SERVICE_NAME.fullmatch(service):
        raise ValueError("has a service name that is not 1-64 letters, digits, '.', '_' or '-'")
    db_text = segments[1] if len(segments) == 2 else "0"
    if not db_text.isascii() or not db_text.isdigit() or len(db_text) > 5:
        raise ValueError("has a database that is not a whole number (the path's /<db>)")
    options = _query_options(parts.query, tls, SENTINEL_SCHEME, TLS_SENTINEL_SCHEME)
    password = options.pop("password", password)
    username = options.pop("username", username)
    return SentinelTarget(
        sentinels=sentinels,
        service=service,
        db=int(db_text),
        username=username,
        password=password,
        sentinel_username=options.pop("sentinel_username", None) or None,
        sentinel_password=options.pop("sentinel_password", None),
        tls=tls,
        options=options,
    )


@dataclass(frozen=True)
class ClusterTarget:
    """What a ``redis(s)+cluster://`` URL names: the start-up nodes and how to log in."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    tls: bool = False  # rediss+cluster://: TLS to every node
    # the other query parameters, converted as redis-py converts them (socket_timeout → float…)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """The node list as written (``host:port,host:port``), no credential."""
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.nodes)


def _login(userinfo: str, at: str) -> tuple[str | None, str | None]:
    """User name and password of a URL's ``userinfo@`` as redis-py reads ``redis://``'s."""
    if not at:
        return None, None
    user, colon, secret = userinfo.partition(":")
    # "user:pw@", ":pw@", and a lone "name@" is a user name
    return unquote(user) or None, (unquote(secret) or None) if colon else None


def _login_and_hosts(
    parts: SplitResult, what: str, default_port: int
) -> tuple[str | None, str | None, tuple[tuple[str, int], ...]]:
    """User name, password and ``(host, port)`` list of a URL with several hosts (Sentinel or
    cluster: ``what`` names one host's kind in errors, ``default_port`` its port when left out)."""
    if "@" in parts.path or "@" in parts.query or parts.fragment:
        raise ValueError(
            "has an '@' or '#' after the host list: percent-encode '/', '?', '#' and '@' "
            "in a password"
        )
    userinfo, at, hosts = parts.netloc.rpartition("@")
    username, password = _login(userinfo, at)
    if not hosts:
        raise ValueError(f"names no {what} (host:port[,host:port…])")
    addresses = tuple(_host_address(piece, what, default_port) for piece in hosts.split(","))
    return username, password, addresses


def _query_options(query: str, tls: bool, plain: str, secure: str) -> dict[str, Any]:
    """The query parameters of a Sentinel or cluster URL, checked and converted as redis-py
    converts them (``plain``/``secure``: the scheme without and with TLS, for the error)."""
    names = [p.partition("=")[0] for p in query.split("&") if p]
    unknown = [n for n in names if n not in QUERY_NAMES]
    if unknown:
        raise ValueError(
            f"has {len(unknown)} query parameter(s) it does not read "
            "(it reads password, socket_timeout, ssl_* …)"
        )
    if not tls and any(n.startswith("ssl") for n in names):
        raise ValueError(
            f"has TLS options (ssl_*), which {plain}:// does not take ({secure}:// does)"
        )
    try:
        options = parse_url("redis://localhost/0?" + query)
    except ValueError as exc:
        # redis-py's text names the parameter, never its value
        reason = str(exc).rstrip(".")
        raise ValueError(f"has a query parameter of the wrong kind ({reason})") from None
    for name in ("host", "db"):
        options.pop(name, None)
    return options


def parse_cluster_url(url: str) -> ClusterTarget:
    """Read ``redis(s)+cluster://[:password@|user:password@]host:port[,host:port…][/0][?…]``.

    ``ValueError`` with one phrase that quotes nothing of the URL when it cannot be read. A
    node's port defaults to 6379; the database must be 0 (a cluster has no other); the query
    parameters are redis-py's (``socket_timeout`` …, and with ``rediss+cluster://`` the
    ``ssl_*`` ones).
    """
    if not is_cluster_url(url):
        raise ValueError(f"must look like {CLUSTER_SHAPE}")
    parts = _split(url)
    tls = parts.scheme == TLS_CLUSTER_SCHEME
    username, password, nodes = _login_and_hosts(parts, "cluster node", REDIS_PORT)
    db_text = parts.path.strip("/") if parts.path else ""
    if parts.path.count("/") > 1 and db_text:
        raise ValueError("has more than /0 in its path (a Redis Cluster has database 0 only)")
    if db_text not in ("", "0"):
        raise ValueError("names a database other than 0 (a Redis Cluster has database 0 only)")
    options = _query_options(parts.query, tls, CLUSTER_SCHEME, TLS_CLUSTER_SCHEME)
    for name in ("sentinel_username", "sentinel_password"):
        if name in options:
            raise ValueError(f"has {name}, which only Sentinel URLs take")
    password = options.pop("password", password)
    username = options.pop("username", username)
    return ClusterTarget(nodes, username, password, tls, options)


def url_problem(url: str) -> str | None:
    """Why redis-py cannot read ``url`` (one phrase, no secret), or None when it can."""
    if not url:
        return "is empty"
    try:
        parts = _split(url)
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme not in SCHEMES:
        return f"must look like {URL_SHAPE}"
    if parts.scheme in SENTINEL_SCHEMES or parts.scheme in CLUSTER_SCHEMES:
        try:
            if parts.scheme in CLUSTER_SCHEMES:
                parse_cluster_url(url)
            else:
                parse_sentinel_url(url)
        except ValueError as exc:
            return str(exc)
        return None
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


def _sentinel_parts(
    url: str, params: dict[str, Any], retry_class: Any = redis.retry.Retry
) -> tuple[SentinelTarget, dict[str, Any], dict[str, Any]]:
    """The target, the Sentinels' connection options and the primary's connection options."""
    target = parse_sentinel_url(url)
    options = {**params, **target.options}  # the URL wins, as in redis-py's from_url
    if target.tls:
        # "ssl" makes redis-py's Sentinel pool use SentinelManagedSSLConnection for the nodes
        options = {**TLS_DEFAULTS, **options, "ssl": True}
    sentinel_kwargs: dict[str, Any] = {
        k: v for k, v in options.items() if k.startswith(("socket_", "ssl"))
    }
    # One try per Sentinel and per call: the next Sentinel is asked at once, and the primary's
    # client retries the whole discovery under its own retry policy.
    sentinel_kwargs["retry"] = retry_class(redis.backoff.NoBackoff(), 0)
    if target.sentinel_password:
        sentinel_kwargs["password"] = target.sentinel_password
    if target.sentinel_username:
        sentinel_kwargs["username"] = target.sentinel_username
    primary = {**options, "db": target.db}
    if target.password:
        primary["password"] = target.password
    if target.username:
        primary["username"] = target.username
    return target, sentinel_kwargs, primary


class _BlockingSentinelPool(aiosentinel.SentinelConnectionPool, BlockingConnectionPool):
    """A Sentinel-managed async pool that waits for a free connection (as the pools' own)."""


def _build(url: str, params: dict[str, Any], build: Any) -> Any:
    validate_url(url)
    try:
        return build()
    except RedisConfigError:
        raise
    except (TypeError, ValueError) as exc:
        reason = mask_secrets(str(exc), url_secrets(url))
        raise RedisUrlError(f"invalid REDIS_URL {mask_url(url)!r}: {reason}") from None


TLS_DEFAULTS: dict[str, Any] = {"ssl_cert_reqs": "required", "ssl_check_hostname": True}


def _with_tls_defaults(url: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with verification on for a ``rediss://`` URL (the URL's own options still win)."""
    if url.startswith("rediss://"):
        return {**TLS_DEFAULTS, **params}
    return params


def url_user(url: str) -> str:
    """The ACL user redis-py logs in as for ``url`` (``default`` when the URL names none)."""
    try:
        if is_sentinel_url(url):
            return parse_sentinel_url(url).username or "default"
        if is_cluster_url(url):
            return parse_cluster_url(url).username or "default"
        return str(parse_url(url).get("username") or "default")
    except ValueError:
        return "default"


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during (libraries wrap socket errors)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _where(url: str) -> str:
    try:
        parts = _split(url)
        default = {"https": 443, "http": 80}.get(parts.scheme, 6379)
        return f"{parts.hostname}:{parts.port or default}"
    except ValueError:
        return "?"


def tls_problem(
    exc: BaseException,
    url: str,
    what: str = "Redis",
    setting: str = "REDIS_URL",
    ca: str = "ssl_ca_certs",
    *,
    at: str = "",
) -> str | None:
    """Why the TLS handshake with ``what`` at ``url`` (or the ``host:port`` ``at``) failed (host
    and cause, one line naming ``setting`` and the CA setting ``ca``), or None when ``exc`` is no
    TLS failure."""
    chain = exception_chain(exc)
    where = at or _where(url)
    for error in chain:
        if isinstance(error, ssl.SSLCertVerificationError):
            said = str(error.verify_message or error.reason or error).rstrip(".")
            if error.verify_code == 62 or "Hostname mismatch" in said or "IP address" in said:
                cause = f"its name does not match the URL's host ({said})"
            elif error.verify_code == 10 or "expired" in said:
                cause = "it has expired (renew it: crawlfleet ca issue)"
            elif error.verify_code in (2, 19, 20, 21) or "issuer" in said or "self" in said:
                cause = f"it is not signed by the CA in {ca} ({said})"
            else:
                cause = said
            return f"the TLS certificate of {what} at {where} does not verify ({setting}): {cause}"
    for error in chain:
        if isinstance(error, ssl.SSLError):
            said = str(error.reason or error).rstrip(".")
            return f"no TLS session with {what} at {where} ({setting}): {said}"
    return None


def permission_problem(
    error: BaseException | str, url: str, command: str = "", setting: str = "REDIS_URL"
) -> str:
    """A NOPERM reply (the error or its masked text) as one line: the URL's user (of the
    ``setting`` that names it), the refusal."""
    said = str(error).rstrip(".")
    found = re.search(r"run the '([^']+)' command", said)
    refused = command or (found.group(1).upper() if found else "")
    what = f"may not run {refused}" if refused else "may not do this"
    return f"Redis user {url_user(url)!r} ({setting}) {what}: {said}"


def _cluster_parts(url: str, params: dict[str, Any]) -> tuple[ClusterTarget, dict[str, Any]]:
    """The target and every node's connection options (``health_check_interval`` is the single
    connection pool's option, which RedisCluster does not take)."""
    target = parse_cluster_url(url)
    options = {**params, **target.options}  # the URL wins, as in redis-py's from_url
    options.pop("health_check_interval", None)
    if target.tls:
        options = {**TLS_DEFAULTS, **options, "ssl": True}
    if target.password:
        options["password"] = target.password
    if target.username:
        options["username"] = target.username
    return target, options


def _cluster_unreachable(url: str, exc: BaseException) -> RedisConfigError:
    """No start-up node of a cluster URL answered (or the cluster is down): one line."""
    target = parse_cluster_url(url)
    said = mask_secrets(str(exc), url_secrets(url)).strip().splitlines()
    reason = said[0].rstrip(".") if said else type(exc).__name__
    tls = tls_problem(exc, url, "a Redis Cluster node", at=target.where)
    if tls is not None:
        return RedisAuthError(tls)
    if any(isinstance(e, redis.AuthenticationError) for e in exception_chain(exc)) or (
        "WRONGPASS" in reason or "NOAUTH" in reason or "invalid password" in reason.lower()
    ):
        return RedisAuthError(
            f"the Redis Cluster at {target.where} rejected the password (REDIS_URL)"
        )
    return RedisConfigError(
        f"no node of the Redis Cluster at {target.where} answers (REDIS_URL): {reason}"
    )


def get_redis(url: str, **params: Any) -> redis.Redis:
    """Return the process-wide client for ``url`` (one connection pool per URL and parameters).

    A ``redis+sentinel://`` URL gives a client of the primary its Sentinels name now, and
    after a failover the new one (asked again on every new connection). A ``redis+cluster://``
    URL gives a ``redis.cluster.RedisCluster`` (it asks a start-up node for the slots at once:
    ``RedisConfigError`` when none answers).
    """

    def build() -> redis.Redis:
        if is_sentinel_url(url):
            target, sentinel_kwargs, primary = _sentinel_parts(url, params)
            manager = redis.sentinel.Sentinel(target.sentinels, sentinel_kwargs=sentinel_kwargs)
            return manager.master_for(target.service, **primary)
        if is_cluster_url(url):
            return _cluster_client(url, params)  # type: ignore[return-value]
        return redis.Redis.from_url(url, **_with_tls_defaults(url, params))

    key = (url, tuple(sorted(params.items())))
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _build(url, params, build)
            _clients[key] = client
        return client


def _outage(exc: redis.exceptions.RedisClusterException) -> redis.ConnectionError:
    error = redis.ConnectionError(f"Redis Cluster: {exc}")
    error.__cause__ = exc
    return error


class _ClusterPipeline(redis.cluster.ClusterPipeline):
    """A cluster pipeline whose "no node for this slot now" is a ``redis.ConnectionError``."""

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return super().execute(raise_on_error)
        except redis.exceptions.RedisClusterException as exc:
            raise _outage(exc) from exc


class FleetCluster(redis.cluster.RedisCluster):
    """redis-py's ``RedisCluster``, except that its own errors while the cluster reorganises
    (``SlotNotCoveredError``, "cannot be connected": no ``redis.RedisError``) are raised as
    ``redis.ConnectionError``: every caller already keeps its work and retries on those."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().execute_command(*args, **kwargs)
        except redis.exceptions.RedisClusterException as exc:
            raise _outage(exc) from exc

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        pipe.__class__ = _ClusterPipeline
        return pipe


def _cluster_client(url: str, params: dict[str, Any]) -> redis.cluster.RedisCluster:
    target, options = _cluster_parts(url, params)
    nodes = [redis.cluster.ClusterNode(host, port) for host, port in target.nodes]
    try:
        return FleetCluster(startup_nodes=nodes, **options)
    except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
        raise _cluster_unreachable(url, exc) from None


def get_async_redis(url: str, *, blocking: bool = False, **params: Any) -> aioredis.Redis:
    """A new asyncio client for ``url`` (a service builds one and keeps it for its lifetime).

    ``blocking``: a request beyond ``max_connections`` waits up to ``timeout`` seconds for a
    free connection instead of failing. ``redis+sentinel://`` URLs follow failovers as
    ``get_redis``'s clients do; ``redis+cluster://`` URLs give a
    ``redis.asyncio.cluster.RedisCluster`` (it connects on its first command; ``blocking`` is
    its per-node ``max_connections`` limit as it is).
    """

    def build() -> aioredis.Redis:
        if is_sentinel_url(url):
            target, sentinel_kwargs, primary = _sentinel_parts(url, params, AsyncRetry)
            manager = aiosentinel.Sentinel(target.sentinels, sentinel_kwargs=sentinel_kwargs)
            pool_class = _BlockingSentinelPool if blocking else aiosentinel.SentinelConnectionPool
            return manager.master_for(target.service, connection_pool_class=pool_class, **primary)
        if is_cluster_url(url):
            cluster, cluster_options = _cluster_parts(url, params)
            cluster_options.pop("timeout", None)
            nodes = [aiocluster.ClusterNode(host, port) for host, port in cluster.nodes]
            return aiocluster.RedisCluster(startup_nodes=nodes, **cluster_options)  # type: ignore[return-value]
        options = _with_tls_defaults(url, params)
        if blocking:
            return aioredis.Redis.from_pool(BlockingConnectionPool.from_url(url, **options))
        return aioredis.Redis.from_url(url, **options)

    built: aioredis.Redis = _build(url, params, build)
    return built


def sentinel_problem(url: str, timeout: float = 2.0, setting: str = "REDIS_URL") -> str:
    """Why no primary was found through the Sentinels of ``url`` (named ``setting``): one line,
    no secret.

    Asks each Sentinel in turn: none reachable, one refusing ``sentinel_password``, none
    knowing the service, or the service known but its primary unreachable.
    """
    target, sentinel_kwargs, _ = _sentinel_parts(url, {})
    secrets = url_secrets(url)
    where = f"{target.where} ({setting})"
    answered: set[str] = set()
    errors: list[str] = []
    for host, port in target.sentinels:
        sentinel = redis.Redis(
            host,
            port,
            **{**sentinel_kwargs, "socket_timeout": timeout, "socket_connect_timeout": timeout},
        )
        try:
            reply = sentinel.sentinel_masters()
        except (redis.AuthenticationError, redis.ResponseError) as exc:
            if isinstance(exc, redis.AuthenticationError) or "NOAUTH" in str(exc):
                return f"the Sentinel at {host}:{port} refused sentinel_password ({setting})"
            if isinstance(exc, redis.exceptions.NoPermissionError):
                who = "sentinel_username" if target.sentinel_username else "its default user"
                return (
                    f"the Sentinel at {host}:{port} does not let {who} ask for the primary "
                    f"(SENTINEL MASTERS: NOPERM) ({setting})"
                )
            errors.append(mask_secrets(str(exc), secrets))
            continue
        except (redis.RedisError, OSError) as exc:
            tls = tls_problem(exc, url, "the Sentinel", at=f"{host}:{port}")
            if tls is not None:
                return tls
            errors.append(mask_secrets(str(exc), secrets))
            continue
        finally:
            sentinel.close()
        masters: dict[str, Any] = reply if isinstance(reply, dict) else {}
        state = masters.get(target.service)
        if state is None:
            answered.update(str(name) for name in masters)
            continue
        address = f"{state.get('ip')}:{state.get('port')}"
        return (
            f"the Sentinels of {where} name {address} as the primary of "
            f"{target.service!r} (flags {state.get('flags', '?')}), and it cannot be reached"
        )
    if len(errors) < len(target.sentinels):
        known = ", ".join(sorted(answered)[:5]) or "none"
        return f"no Sentinel at {where} knows a service {target.service!r} (they know: {known})"
    return f"no Sentinel reachable at {where}: {errors[0].rstrip('.')}"


def _node_address(client: redis.Redis) -> str:
    """The ``host:port`` a Sentinel-managed client last connected to, or ``""``."""
    address = getattr(client.connection_pool, "master_address", None)
    return f"{address[0]}:{address[1]}" if address else ""


def check_connection(client: redis.Redis, url: str, setting: str = "REDIS_URL") -> None:
    """Ping Redis once; on failure raise a one-line ``RedisConfigError`` naming the masked URL
    and ``setting`` (where it was configured).

    ``RedisAuthError`` when Redis refuses the credentials (configuration), the base class when
    it cannot be reached (an outage). On a Redis Cluster: a node answers and says the cluster is
    ``ok`` (``CLUSTER INFO``), else one line naming the start-up nodes.
    """
    if isinstance(client, redis.cluster.RedisCluster):
        _check_cluster(client, url)
        return
    try:
        client.ping()
    except redis.sentinel.MasterNotFoundError:
        problem = sentinel_problem(url, setting=setting)
        if problem.startswith(("the TLS certificate", "no TLS session")):
            raise RedisAuthError(problem) from None  # as for rediss://: a restart would not help
        if " knows a service " in problem or "sentinel_password" in problem or "NOPERM" in problem:
            raise RedisUrlError(problem) from None  # configuration: a restart would not help
        raise RedisConfigError(problem) from None
    except redis.AuthenticationError:
        raise RedisAuthError(
            f"Redis at {mask_url(url)} rejected the password ({setting})"
        ) from None
    except redis.exceptions.NoPermissionError as exc:
        if is_sentinel_url(url) and "'sentinel|" in str(exc):  # the Sentinel's user, not Redis's
            raise RedisUrlError(sentinel_problem(url, setting=setting)) from None
        raise RedisAuthError(permission_problem(exc, url, "PING", setting)) from None
    except redis.ResponseError as exc:
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise RedisAuthError(
                f"Redis at {mask_url(url)} needs a valid password ({setting}): {exc}"
            ) from None
        raise
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        tls = tls_problem(exc, url, setting=setting, at=_node_address(client))
        if tls is not None:
            raise RedisAuthError(tls) from None  # configuration: a restart would not help
        raise RedisConfigError(
            f"cannot reach Redis at {mask_url(url)} ({setting}): {exc}"
        ) from None


def _check_cluster(client: redis.cluster.RedisCluster, url: str) -> None:
    """One line when no node answers or the first node that does says the cluster is not
    ``ok`` (each node the client knows is asked in turn)."""
    info: Any = None
    error: BaseException | None = None
    for node in client.get_nodes():
        try:
            info = client.cluster_info(target_nodes=node)
            break
        except redis.exceptions.NoPermissionError as exc:
            raise RedisAuthError(permission_problem(exc, url, "CLUSTER INFO")) from None
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
            error = exc
    if info is None:
        raise _cluster_unreachable(url, error or redis.ConnectionError("no node known")) from None
    state = str(info.get("cluster_state", "?")) if isinstance(info, dict) else "?"
    if state != "ok":
        where = parse_cluster_url(url).where
        raise RedisConfigError(
            f"the Redis Cluster at {where} is down (REDIS_URL): cluster_state is {state}, "
            f"{info.get('cluster_slots_ok', '?')} of 16384 slots served"
        )

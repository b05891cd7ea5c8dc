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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, quote, unquote, urlsplit

import redis.asyncio.cluster as aiocluster
import redis.cluster
from redis.connection import parse_url

from crawlfleet.hub.errors import RedisUrlError

#: The Redis every crawlfleet process reaches when nothing names one (a hub on this host).
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
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
    parts, tls, username, password, sentinels = _login_and_hosts(url, "Sentinel", SENTINEL_PORT)
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
    url: str, what: str, default_port: int
) -> tuple[SplitResult, bool, str | None, str | None, tuple[tuple[str, int], ...]]:
    """The parts of a URL with several hosts (Sentinel or cluster), whether it is TLS
    (``rediss+…``), its user name, password and ``(host, port)`` list: ``what`` names one host's
    kind in errors, ``default_port`` its port when left out. The one reader of both forms."""
    parts = _split(url)
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
    return parts, parts.scheme.startswith("rediss+"), username, password, addresses


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
    parts, tls, username, password, nodes = _login_and_hosts(url, "cluster node", REDIS_PORT)
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


def host_port(url: str) -> str:
    """``host:port`` of ``url`` (the scheme's default port when it has none; ``?`` unreadable)."""
    try:
        parts = _split(url)
        default = {"https": 443, "http": 80}.get(parts.scheme, 6379)
        return f"{parts.hostname}:{parts.port or default}"
    except ValueError:
        return "?"

"""Clients for the hub's Redis: one pool per process and URL, checked in one line.

``get_redis`` and ``get_async_redis`` build the client a URL names (plain, TLS, through Sentinel,
a Redis Cluster; the forms are read by :mod:`crawlfleet.hub.urls`); ``redis_from_settings``
builds it from a Scrapy project's ``REDIS_URL`` (or ``REDIS_HOST``/``REDIS_PORT``) and
``REDIS_PARAMS``; ``check_connection`` turns the first failure into one line naming the host and
the cause (a certificate, a password, an ACL right, a missing primary).
"""

from __future__ import annotations

import re
import ssl
import threading
from typing import Any, Protocol

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

from crawlfleet.hub.errors import RedisAuthError, RedisConfigError, RedisUrlError
from crawlfleet.hub.urls import (
    DEFAULT_REDIS_URL,
    ClusterTarget,
    SentinelTarget,
    host_port,
    is_cluster_url,
    is_sentinel_url,
    mask_secrets,
    mask_url,
    parse_cluster_url,
    parse_sentinel_url,
    url_secrets,
    url_user,
    validate_url,
)

TLS_DEFAULTS: dict[str, Any] = {"ssl_cert_reqs": "required", "ssl_check_hostname": True}


def _with_tls_defaults(url: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with verification on for a ``rediss://`` URL (the URL's own options still win)."""
    if url.startswith("rediss://"):
        return {**TLS_DEFAULTS, **params}
    return params


# socket_timeout bounds how long any frontier call can block the reactor: no retries inside a
# call (a failed call is retried by the scheduler later, from the reactor), and the connect
# timeout is clamped to it.
DEFAULT_REDIS_PARAMS: dict[str, Any] = {
    "socket_timeout": 10,
    "socket_connect_timeout": 10,
    "health_check_interval": 30,
}


class Settings(Protocol):
    """What ``redis_from_settings`` reads of a Scrapy ``Settings`` (no Scrapy import here)."""

    def get(self, name: str, default: Any = None) -> Any: ...


_clients: dict[tuple[str, tuple[tuple[str, Any], ...]], redis.Redis] = {}
_lock = threading.Lock()


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


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during (libraries wrap socket errors)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


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
    where = at or host_port(url)
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


def redis_url(settings: Settings) -> str:
    """``REDIS_URL``, or ``redis://REDIS_HOST:REDIS_PORT/0`` as scrapy-redis builds it."""
    url = settings.get("REDIS_URL")
    if url:
        return str(url)
    host, port = settings.get("REDIS_HOST"), settings.get("REDIS_PORT")
    if host or port:
        return f"redis://{host or '127.0.0.1'}:{port or 6379}/0"
    return DEFAULT_REDIS_URL


def redis_params(settings: Settings) -> dict[str, Any]:
    params = settings.get("REDIS_PARAMS") or {}
    if not isinstance(params, dict):
        raise RedisConfigError(f"REDIS_PARAMS must be a dict, got {type(params).__name__}")
    merged = {**DEFAULT_REDIS_PARAMS, **params}
    timeout = merged.get("socket_timeout")
    if not isinstance(timeout, int | float) or timeout <= 0:
        raise RedisConfigError(
            f"REDIS_PARAMS['socket_timeout'] must be a positive number of seconds, got {timeout!r}"
        )
    connect = merged.get("socket_connect_timeout")
    if not isinstance(connect, int | float) or connect <= 0 or connect > timeout:
        merged["socket_connect_timeout"] = timeout
    return merged


def redis_from_settings(settings: Settings, check: bool = True) -> redis.Redis:
    """The process-wide client for the frontier (one pool shared by every frontier component)."""
    url = redis_url(settings)
    client = get_redis(url, **redis_params(settings))
    if check:
        check_connection(client, url)
    return client

"""`crawlfleet check`: a worker's preflight — can this host work with the hub right now?

Ansible runs it on every worker before it starts crawler units, and stops with its message
when a check fails. Each check waits at most ``--timeout`` seconds per network step:

* ``redis``: connect, AUTH and PING at REDIS_URL, then one pipelined write (a ``SET`` with a
  short expiry of ``crawlfleet:check:<hostname>`` and its ``DEL``) plus ``INFO memory``. A real
  write is the only cheap probe that catches every reason Redis refuses the frontier's writes
  (read-only replica, ``MISCONF`` after a failed save, ``OOM`` at maxmemory, ACLs); ``INFO``
  shows an eviction policy that could drop frontier keys when a memory limit is set.
* ``proxypool`` (when PROXYPOOL_URL is set): ``GET /count`` with ``X-API-Key`` answers 200.
* ``accountpool`` (when ACCOUNTPOOL_URL is set): ``GET /<site>/count`` with its key answers 200.

An ``https://`` pool and a ``rediss://`` Redis are verified as the workers verify them (the
pools' ``<POOL>_CA_FILE`` or ``CRAWLFLEET_CA_FILE``, the URL's ``ssl_ca_certs``); a certificate
that does not verify is one line naming the host and the cause (another CA, another name,
expired), a Redis user without the rights one naming the user and the refused command.

One line per check on stdout (``ok   …`` or ``FAIL … from <this host>: <cause>``), or one JSON
object with ``--json``. Exit status 0 when every check passes, 1 when one fails, 2 on bad
usage. Passwords and API keys never appear in the output.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from scrapy.exceptions import NotConfigured
from scrapy.settings import BaseSettings

from crawlfleet.commands.opsargs import (
    UsageError,
    add_pool_args,
    add_redis_arg,
    pool_config,
    run_guarded,
)
from crawlfleet.hub.connect import (
    exception_chain,
    get_redis,
    permission_problem,
    sentinel_problem,
    tls_problem,
)
from crawlfleet.hub.errors import RedisConfigError
from crawlfleet.hub.urls import (
    has_credentials,
    is_cluster_client,
    mask_secrets,
    mask_url,
    url_secrets,
)
from crawlfleet.middlewares.poolclient import ca_context
from crawlfleet.views.pools import PoolConfig

DEFAULT_TIMEOUT = 5.0
# The probe key expires by itself should the DEL never run (the process killed in between).
PROBE_TTL = 30
BODY_EXCERPT = 200


def add_parser(subparsers: Any) -> None:
    text = "preflight of a worker: can this host reach and use the hub's Redis and pools?"
    p = subparsers.add_parser("check", help=text, description=text)
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds each network step may take (default %(default)g)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_redis_arg(p)
    add_pool_args(p)
    p.set_defaults(run=run)


@dataclass(frozen=True)
class CheckResult:
    name: str
    target: str  # what was checked, password masked
    ok: bool
    detail: str  # the measurement when ok, the cause in operator's words otherwise
    seconds: float

    def line(self, host: str) -> str:
        if self.ok:
            return f"ok   {self.name} {self.target} ({self.detail})"
        return f"FAIL {self.name} {self.target} from {host}: {self.detail}"


@dataclass(frozen=True)
class PoolSpec:
    """One pool as the check sees it: where, with which key, and how its count reads."""

    name: str  # check name: proxypool, accountpool
    what: str  # in sentences: "proxy pool"
    url_env: str
    key_env: str
    count_url: str
    api_key: str
    # The count from a 200 answer, in words ("12 proxies"); raises on an unexpected body.
    describe: Callable[[httpx.Response], str]
    site: str = ""


def report_json(host: str, results: Iterable[CheckResult]) -> str:
    checks = [asdict(r) | {"seconds": round(r.seconds, 4)} for r in results]
    return json.dumps({"host": host, "ok": all(c["ok"] for c in checks), "checks": checks})


def quote(text: str, secrets: Iterable[str]) -> str:
    """Someone else's text (a server's reply, an exception) with every secret masked.

    Our own phrases never contain a secret; only quoted text could (a server echoing input).
    """
    return mask_secrets(text, secrets)


def network_cause(
    exc: BaseException, *, service: str, url: str, env: str, timeout: float, host: str
) -> str | None:
    """The operator's reading of a failure to talk to ``url`` at all, or None if it is not one."""
    chain = exception_chain(exc)
    if any(isinstance(e, socket.gaierror) for e in chain):
        name = urlsplit(url).hostname or ""
        return (
            f"cannot resolve {name!r} (DNS): check the host name in {env} "
            f"and this host's /etc/hosts or resolver"
        )
    refused = "Connection refused" in str(exc)
    if refused or any(isinstance(e, ConnectionRefusedError) for e in chain):
        return f"refused: is {service} running and listening on that address?"
    unreachable = (errno.EHOSTUNREACH, errno.ENETUNREACH)
    no_route = ("No route to host", "Network is unreachable")
    if any(isinstance(e, OSError) and e.errno in unreachable for e in chain) or any(
        text in str(e) for e in chain for text in no_route
    ):
        return f"no route to that address: is the hub up, and is its address in {env} right?"
    timeouts = (TimeoutError, redis.TimeoutError, httpx.TimeoutException)
    if any(isinstance(e, timeouts) for e in chain):
        return (
            f"no answer within {timeout:g} s: is the hub up, "
            f"and does its firewall admit this host ({host})?"
        )
    if any(isinstance(e, FileNotFoundError) for e in chain):
        return f"no such socket: is {service} running (check the path in {env})?"
    return None


def redis_cause(
    exc: BaseException, url: str, timeout: float, host: str, secrets: Iterable[str] = ()
) -> str:
    """Why the connection, AUTH or PING failed, in words an operator can act on."""
    if isinstance(exc, redis.sentinel.MasterNotFoundError):
        return sentinel_problem(url, timeout)
    tls = tls_problem(exc, url)
    if tls is not None:
        return tls
    text = quote(str(exc), [*secrets, *url_secrets(url)])
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return permission_problem(text, url, "PING")
    if isinstance(exc, redis.AuthenticationError) or any(
        word in text for word in ("NOAUTH", "WRONGPASS")
    ):
        if has_credentials(url):
            return "wrong password (REDIS_URL)"
        return "wrong password (REDIS_URL): Redis requires one and the URL has none"
    found = network_cause(
        exc, service="redis-server", url=url, env="REDIS_URL", timeout=timeout, host=host
    )
    if found is not None:
        return found
    if isinstance(exc, redis.ResponseError):
        return f"Redis refused the connection's setup (REDIS_URL): {text}"
    return f"cannot talk to Redis: {type(exc).__name__}: {text}"


def check_redis(
    client: redis.Redis, url: str, timeout: float, host: str, secrets: Iterable[str] = ()
) -> CheckResult:
    secrets = [*secrets, *url_secrets(url)]
    target = mask_url(url)
    start = time.perf_counter()

    def result(ok: bool, detail: str) -> CheckResult:
        return CheckResult("redis", target, ok, detail, time.perf_counter() - start)

    try:
        client.ping()
        pong_ms = (time.perf_counter() - start) * 1000
        key = f"crawlfleet:check:{host}"
        cluster = is_cluster_client(client)
        pipe = client.pipeline(transaction=False)
        pipe.set(key, f"{time.time():.3f}", ex=PROBE_TTL)
        pipe.delete(key)
        if not cluster:  # a cluster pipeline runs no INFO: every primary's, asked on its own
            pipe.info("memory")
        written, _, *memories = pipe.execute(raise_on_error=False)
        if cluster:
            memories = _primaries_memory(client)
    except (redis.RedisError, OSError) as exc:
        return result(False, redis_cause(exc, url, timeout, host, secrets))
    if isinstance(written, redis.ReadOnlyError):
        return result(
            False,
            "read-only replica: REDIS_URL must name the hub's primary "
            "(the frontier writes on every request)",
        )
    if isinstance(written, redis.exceptions.NoPermissionError):
        said = quote(str(written), secrets)
        return result(False, permission_problem(said, url, f"SET {key}"))
    if isinstance(written, Exception):
        return result(False, f"Redis refuses writes: {quote(str(written), secrets)}")
    for memory in memories:
        problem = eviction_problem(memory)
        if problem:
            return result(False, problem)
    return result(True, f"PONG in {pong_ms:.1f} ms")


def _primaries_memory(client: redis.Redis) -> list[Any]:
    """``INFO memory`` of every primary of a Redis Cluster (none where INFO is refused)."""
    try:
        found = client.info("memory", target_nodes=client.PRIMARIES)  # type: ignore[attr-defined]
    except redis.ResponseError:
        return []
    return list(found.values())


def eviction_problem(memory: Any) -> str | None:
    """A memory limit with an evicting policy would drop frontier keys (requests lost).

    ``memory`` is the ``INFO memory`` reply; an error reply (INFO disabled by ACL or renaming)
    is not a failure of the check.
    """
    if not isinstance(memory, dict):
        return None
    policy = str(memory.get("maxmemory_policy", "noeviction"))
    try:
        limit = int(memory.get("maxmemory", 0))
    except (TypeError, ValueError):
        return None
    if limit <= 0 or policy == "noeviction":
        return None
    human = memory.get("maxmemory_human", f"{limit} bytes")
    return (
        f"maxmemory-policy is {policy} with maxmemory {human}: Redis may evict frontier keys "
        f"and lose requests; set maxmemory-policy noeviction"
    )


def pool_specs(config: PoolConfig) -> list[PoolSpec]:
    """The pools that have a URL, addressed as :func:`crawlfleet.views.pools.pool_counts` does."""
    specs: list[PoolSpec] = []
    if config.proxypool_url:
        specs.append(
            PoolSpec(
                name="proxypool",
                what="proxy pool",
                url_env="PROXYPOOL_URL",
                key_env="PROXYPOOL_API_KEY",
                count_url=config.proxypool_url.rstrip("/") + "/count",
                api_key=config.proxypool_api_key,
                describe=lambda r: f"{int(r.text.strip())} proxies",
            )
        )
    if config.accountpool_url:
        site = config.accountpool_site
        specs.append(
            PoolSpec(
                name="accountpool",
                what="account pool",
                url_env="ACCOUNTPOOL_URL",
                key_env="ACCOUNTPOOL_API_KEY",
                count_url=f"{config.accountpool_url.rstrip('/')}/{site}/count",
                api_key=config.accountpool_api_key,
                describe=lambda r: f"{int(r.json()['count'])} valid tokens for {site}",
                site=site,
            )
        )
    return specs


def _body(response: httpx.Response) -> str:
    """The pool's own explanation: the ``error`` of a JSON body, or the first line of text."""
    try:
        data = response.json()
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return str(data["error"])[:BODY_EXCERPT]
    except ValueError:
        pass
    lines = response.text.strip().splitlines()
    return lines[0][:BODY_EXCERPT] if lines else ""


def pool_answer(
    spec: PoolSpec, response: httpx.Response, secrets: Iterable[str] = ()
) -> tuple[bool, str]:
    """``(ok, detail)`` for the pool's answer to the count request."""
    code = response.status_code
    if code == 200:
        try:
            return True, spec.describe(response)
        except (ValueError, KeyError, TypeError):
            return False, (
                f"answered HTTP 200 without a count: is {spec.url_env} the {spec.what}'s address?"
            )
    if code == 401:
        if spec.api_key:
            return False, f"the {spec.what} refused the API key ({spec.key_env})"
        return False, f"the {spec.what} wants an API key: set {spec.key_env}"
    if code == 404 and spec.site:
        known = ""
        try:
            sites = response.json().get("known_sites")
            if isinstance(sites, list):
                known = f"; it knows: {', '.join(str(s) for s in sites) or 'none'}"
        except (ValueError, AttributeError):
            pass
        return False, (
            f"the {spec.what} has no site {spec.site!r} "
            f"(ACCOUNTPOOL_SITE or --accountpool-site{known})"
        )
    excerpt = quote(_body(response), [*secrets, spec.api_key])
    said = f": {excerpt}" if excerpt else ""
    if code >= 500:
        return False, f"the {spec.what} is down: HTTP {code}{said}"
    return (
        False,
        f"unexpected answer HTTP {code}{said}: is {spec.url_env} the {spec.what}'s address?",
    )


def check_pool(
    spec: PoolSpec, timeout: float, host: str, secrets: Iterable[str] = ()
) -> CheckResult:
    secrets = [*secrets, spec.api_key]
    target = mask_url(spec.count_url)
    start = time.perf_counter()
    headers = {"X-API-Key": spec.api_key} if spec.api_key else {}
    pool = spec.url_env.removesuffix("_URL")
    try:
        # the CA the workers' pool clients verify with (<POOL>_CA_FILE, CRAWLFLEET_CA_FILE)
        ca_setting, verify = ca_context(BaseSettings(), pool)
    except NotConfigured as exc:
        return CheckResult(spec.name, target, False, str(exc), time.perf_counter() - start)
    try:
        # trust_env=False: the hub is reached directly, never through an HTTP(S)_PROXY.
        response = httpx.get(
            spec.count_url, headers=headers, timeout=timeout, trust_env=False, verify=verify
        )
    except httpx.HTTPError as exc:
        tls = tls_problem(exc, spec.count_url, f"the {spec.what}", spec.url_env, ca_setting)
        if tls is not None:
            return CheckResult(spec.name, target, False, tls, time.perf_counter() - start)
        cause = network_cause(
            exc,
            service=f"the {spec.what}",
            url=spec.count_url,
            env=spec.url_env,
            timeout=timeout,
            host=host,
        )
        said = quote(f"{type(exc).__name__}: {exc}", secrets)
        detail = cause or f"cannot talk to the {spec.what}: {said}"
        return CheckResult(spec.name, target, False, detail, time.perf_counter() - start)
    ok, detail = pool_answer(spec, response, secrets)
    elapsed = time.perf_counter() - start
    if ok:
        detail = f"{detail}, HTTP 200 in {elapsed * 1000:.1f} ms"
    return CheckResult(spec.name, target, ok, detail, elapsed)


def validate_timeout(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"--timeout must be a number of seconds > 0, got {value:g}")
    return value


def validate_pool_url(url: str, env: str, flag: str) -> None:
    if not url:
        return
    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        valid = valid and (parts.port is None or parts.port > 0)
    except ValueError:  # a port that is not a number, or out of range
        valid = False
    if not valid:
        raise UsageError(f"{env} ({flag}) must look like http://host:port, got {mask_url(url)!r}")


def _run(args: argparse.Namespace) -> int:
    timeout = validate_timeout(args.timeout)
    url = args.redis_url
    if not url:
        raise UsageError("no Redis URL: pass --redis-url or set REDIS_URL")
    try:
        # No retries: the check reports the first failure at once, within its timeout.
        client = get_redis(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
    except RedisConfigError as exc:
        raise UsageError(str(exc)) from None
    config = pool_config(args)
    validate_pool_url(config.proxypool_url, "PROXYPOOL_URL", "--proxypool-url")
    validate_pool_url(config.accountpool_url, "ACCOUNTPOOL_URL", "--accountpool-url")
    if not config.accountpool_site or "/" in config.accountpool_site:
        raise UsageError(
            f"ACCOUNTPOOL_SITE (--accountpool-site) must be a site name, "
            f"got {config.accountpool_site!r}"
        )

    host = socket.gethostname()
    # Every secret of this run is masked in any text quoted from a server or an exception.
    secrets = (*url_secrets(url), config.proxypool_api_key, config.accountpool_api_key)
    results = [check_redis(client, url, timeout, host, secrets)]
    results += [check_pool(spec, timeout, host, secrets) for spec in pool_specs(config)]
    if args.json:
        print(report_json(host, results))
    else:
        for item in results:
            print(item.line(host))
    return 0 if all(r.ok for r in results) else 1


def run(args: argparse.Namespace) -> int:
    return run_guarded("check", _run, args)

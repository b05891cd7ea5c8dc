"""Redis over TLS (``rediss://…?ssl_ca_certs=``) against a real ``redis-server --tls-port``:
a frontier crawl works, and a certificate that does not verify — another CA, another host
name, expired — is one line naming the host and the cause in ``crawlfleet check``, ``status``
and at the scheduler's start."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from support.crawl import Site, frontier_settings
from support.lifecycle import running
from support.secureredis import SecureRedis, make_tls_files, start_tls_redis

from crawlfleet.hub.connect import get_redis
from crawlfleet.service import tlsca


@pytest.fixture(scope="module")
def tls_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRedis]:
    base = tmp_path_factory.mktemp("tls")
    yield from running(start_tls_redis(base / "redis", make_tls_files(base / "ca")))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )


def test_the_client_verifies_by_default(tls_hub: SecureRedis) -> None:
    client = get_redis(tls_hub.url("default"))
    assert client.ping()
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["ssl_cert_reqs"] == "required" and kwargs["ssl_check_hostname"] is True


def test_a_frontier_crawl_over_tls(tls_hub: SecureRedis, site: Site, start_worker) -> None:
    worker = start_worker(site.url, frontier_settings(tls_hub.url("default")))
    assert worker.wait() == 0
    assert site.crawled() == site.expected()
    assert max(site.hits[p] for p in site.expected()) == 1
    done = cli("check", "--redis-url", tls_hub.url("default"))
    assert done.returncode == 0 and done.stdout.startswith("ok   redis rediss://"), done.stdout


def test_a_plain_client_is_refused(tls_hub: SecureRedis) -> None:
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=tls_hub.port, socket_timeout=2, password="x").ping()


def _past() -> datetime.datetime:
    return tlsca.utcnow() - datetime.timedelta(days=10)


@pytest.fixture(
    params=["other-ca", "wrong-name", "expired"],
)
def bad_hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A TLS server whose certificate the client's URL cannot verify, and the expected cause."""
    case = request.param
    if case == "expired":
        files = make_tls_files(tmp_path / "ca", now=_past, days=2)
        cause = "it has expired"
    elif case == "wrong-name":
        files = make_tls_files(tmp_path / "ca", names=("hub.example",))
        cause = "its name does not match"
    else:
        files = make_tls_files(tmp_path / "ca")
        cause = "not signed by the CA in ssl_ca_certs"
    server = start_tls_redis(tmp_path / "redis", files)
    url = server.url("default")
    if case == "other-ca":
        tlsca.ensure_ca(tmp_path / "other")
        url = url.replace(str(files.ca_cert), str(tmp_path / "other" / "ca.crt"))
    yield url, cause
    server.stop()


def test_a_bad_certificate_is_one_line_naming_host_and_cause(
    bad_hub: tuple[str, str], site: Site, start_worker
) -> None:
    url, cause = bad_hub
    where = url.split("@")[1].split("/")[0]
    checked = cli("check", "--redis-url", url)
    assert checked.returncode == 1
    [line] = checked.stdout.strip().splitlines()
    assert where in line and cause in line, line
    status = cli("status", "--redis-url", url)
    assert status.returncode != 0
    [said] = status.stderr.strip().splitlines()
    assert where in said and cause in said, said
    worker = start_worker(site.url, frontier_settings(url))
    assert worker.wait() != 0
    log = worker.log.read_text()
    [start] = [line for line in log.splitlines() if "Frontier cannot start" in line]
    assert where in start and cause in start, start
    assert "password" not in said + line + start

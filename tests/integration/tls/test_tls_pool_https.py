"""The hub services' APIs over HTTPS (--tls-cert/--tls-key): a proxy pool served over TLS, a
worker's pool client verifying it with PROXYPOOL_CA_FILE (or CRAWLFLEET_CA_FILE), a wrong CA
or a wrong host name as one line, and a half TLS configuration refused at start."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler
from support.net import free_port
from support.secureredis import TlsFiles, make_tls_files
from support.services import log_tail, start_process, stop_process
from support.waiting import wait_until

from crawlfleet.middlewares.poolclient import PoolClient, PoolUnavailable, ca_context
from crawlfleet.service import tlsca
from crawlfleet.views.pools import PoolConfig, pool_counts

API_KEY = "proxypool-api-key-0123456789"


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    # localhost only: https://127.0.0.1:… is then a name the certificate does not carry
    return make_tls_files(tmp_path_factory.mktemp("ca"), names=("localhost",))


@pytest.fixture(scope="module")
def https_pool(
    tls_files: TlsFiles, redis_server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("pool") / "proxypool.log"
    env = {
        **os.environ,
        "PROXYPOOL_API_KEY": API_KEY,
        "PROXYPOOL_PROXIES": "10.9.8.7:3128",
        "PROXYPOOL_TEST_LOOP": "false",
        "PROXYPOOL_REDIS_KEY": "tlstest:proxies",
        "PROXYPOOL_TLS_CERT": str(tls_files.cert),
        "PROXYPOOL_TLS_KEY": str(tls_files.key),
    }
    argv = [sys.executable, "-m", "crawlfleet.cli", "proxypool", "serve", "--port", str(port)]
    argv += ["--redis-url", redis_server.url]
    proc = start_process(argv, log, env=env)
    url = f"https://localhost:{port}"
    context = ssl.create_default_context(cafile=str(tls_files.ca_cert))

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the proxy pool exited with {proc.returncode}: {log_tail(log)}")
        try:
            answer = httpx.get(f"{url}/health", verify=context, trust_env=False, timeout=2)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200

    try:
        wait_until(healthy, f"{url}/health over HTTPS", timeout=20)
        yield url
    finally:
        stop_process(proc)
        redis.Redis.from_url(redis_server.url).delete("tlstest:proxies", "tlstest:proxies:stats")


def fetch(url: str, settings: dict[str, str], path: str = "/random") -> str:
    crawler = get_crawler(settings_dict={})
    ca_setting, verify = ca_context(Settings(settings), "PROXYPOOL")
    names = ("the proxypool", "PROXYPOOL_URL", ca_setting)
    client = PoolClient(url, API_KEY, 5.0, crawler.stats, "proxy", verify=verify, names=names)

    async def get() -> str:
        try:
            return await client.get_text(path)
        finally:
            await client.close()

    return asyncio.run(get())


def test_a_workers_client_verifies_the_pool(https_pool: str, tls_files: TlsFiles) -> None:
    assert fetch(https_pool, {"PROXYPOOL_CA_FILE": str(tls_files.ca_cert)}) == "10.9.8.7:3128"
    # one CA file for the whole fleet serves as well
    assert fetch(https_pool, {"CRAWLFLEET_CA_FILE": str(tls_files.ca_cert)}) == "10.9.8.7:3128"


def test_a_wrong_ca_is_one_line(https_pool: str, tmp_path: Path) -> None:
    tlsca.ensure_ca(tmp_path)
    with pytest.raises(PoolUnavailable) as raised:
        fetch(https_pool, {"PROXYPOOL_CA_FILE": str(tmp_path / "ca.crt")})
    [line] = str(raised.value).splitlines()
    port = https_pool.rsplit(":", 1)[1]
    assert f"localhost:{port}" in line and "not signed by the CA in PROXYPOOL_CA_FILE" in line


def test_a_wrong_name_is_one_line(https_pool: str, tls_files: TlsFiles) -> None:
    url = https_pool.replace("localhost", "127.0.0.1")
    with pytest.raises(PoolUnavailable) as raised:
        fetch(url, {"PROXYPOOL_CA_FILE": str(tls_files.ca_cert)})
    [line] = str(raised.value).splitlines()
    assert "does not verify (PROXYPOOL_URL): its name does not match" in line, line


def test_crawlfleet_check_verifies_the_pool(
    https_pool: str, tls_files: TlsFiles, redis_server, tmp_path: Path
) -> None:
    tlsca.ensure_ca(tmp_path)
    base = {**os.environ, "PROXYPOOL_API_KEY": API_KEY}
    argv = [sys.executable, "-m", "crawlfleet.cli", "check", "--redis-url", redis_server.url]
    argv += ["--proxypool-url", https_pool]
    good = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "CRAWLFLEET_CA_FILE": str(tls_files.ca_cert)},
    )
    assert good.returncode == 0, good.stdout + good.stderr
    bad = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "CRAWLFLEET_CA_FILE": str(tmp_path / "ca.crt")},
    )
    assert bad.returncode == 1
    [line] = [x for x in bad.stdout.splitlines() if x.startswith("FAIL")]
    assert "proxy pool at localhost:" in line and "CRAWLFLEET_CA_FILE" in line, line


def test_the_dashboards_pool_counts_verify_the_pool(
    https_pool: str, tls_files: TlsFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # crawlfleet status and the dashboard count the pools with the fleet's CA as well
    config = PoolConfig(proxypool_url=https_pool, proxypool_api_key=API_KEY)
    monkeypatch.setenv("CRAWLFLEET_CA_FILE", str(tls_files.ca_cert))
    assert pool_counts(config)["proxypool"]["count"] == 1
    tlsca.ensure_ca(tmp_path)
    monkeypatch.setenv("CRAWLFLEET_CA_FILE", str(tmp_path / "ca.crt"))
    other_ca = pool_counts(config)["proxypool"]
    assert other_ca["count"] is None and "CERTIFICATE_VERIFY_FAILED" in other_ca["error"], other_ca
    monkeypatch.setenv("CRAWLFLEET_CA_FILE", str(tmp_path / "missing.crt"))
    missing = pool_counts(config)["proxypool"]["error"]
    assert missing.startswith("CRAWLFLEET_CA_FILE: cannot use"), missing


@pytest.mark.parametrize("which", ["PROXYPOOL_TLS_CERT", "PROXYPOOL_TLS_KEY"])
def test_half_a_tls_configuration_is_one_line(tls_files: TlsFiles, which: str) -> None:
    env = {**os.environ, "PROXYPOOL_API_KEY": API_KEY, which: str(tls_files.cert)}
    done = subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli", "proxypool", "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "--tls-cert/PROXYPOOL_TLS_CERT and --tls-key/PROXYPOOL_TLS_KEY go together" in line

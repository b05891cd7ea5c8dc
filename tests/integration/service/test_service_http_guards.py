"""The shared request guard and limits on the four real services (issue 21 items 4 and 6).

Bodies refused while they arrive (chunked or with a lying Content-Length) with memory bounded,
deep or malformed JSON as a one-line 400, a frozen Redis answered with 503 within 2 s, a
wrong-typed key named in a 503, unknown Host names and cross-site writes refused, half-open
connections dropped, the demo site's latency bounded and its stop prompt, and account names
with ``/``.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from hubservice_procs import ADMIN_SECRET, HubService, start_service
from support.waiting import wait_until

from crawlfleet.service import http as service_http

from redis_server import RedisServer

MB = 1 << 20
# (service, path) of every endpoint that reads a body.
BODY_ENDPOINTS = [
    ("proxypool", "/report"),
    ("accountpool", "/demosite/accounts"),
    ("accountpool", "/demosite/report"),
    ("demosite", "/api/login"),
    ("demosite", "/api/admin/config"),
    ("demosite", "/api/admin/revoke"),
]


def headers_for(service: HubService) -> dict[str, str]:
    extra = {"X-Admin-Secret": ADMIN_SECRET} if service.kind == "demosite" else {}
    return {**service.headers, **extra, "Content-Type": "application/json"}


def one_line(response: httpx.Response) -> None:
    assert "\n" not in response.text.strip(), response.text
    assert "Traceback" not in response.text


class RawResponse:
    """Read what a server sends on a socket in a thread, while the test writes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.data = b""
        self.closed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while chunk := self.sock.recv(65536):
                self.data += chunk
        except OSError:
            pass
        self.closed.set()

    @property
    def status(self) -> int | None:
        if not self.data.startswith(b"HTTP/1.1 "):
            return None
        return int(self.data[9:12])


def raw_request(service: HubService, path: str, head: str) -> tuple[socket.socket, RawResponse]:
    sock = socket.create_connection(("127.0.0.1", service.port), timeout=10)
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{service.port}"]
    lines += [f"{k}: {v}" for k, v in headers_for(service).items()]
    sock.sendall(("\r\n".join(lines) + "\r\n" + head + "\r\n").encode())
    return sock, RawResponse(sock)


def send_until_refused(sock: socket.socket, total: int, chunked: bool) -> int:
    """Send ``total`` bytes of body (as 64 KiB chunks if ``chunked``); bytes the server took."""
    block = b"[" * 65536
    frame = f"{len(block):x}\r\n".encode() + block + b"\r\n" if chunked else block
    sent = 0
    try:
        while sent < total:
            sock.sendall(frame)
            sent += len(block)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # the server answered and closed: what we want
    return sent


@pytest.mark.parametrize(("kind", "path"), BODY_ENDPOINTS)
@pytest.mark.parametrize("framing", ["chunked", "lying-length"])
def test_big_bodies_are_refused_while_reading(
    hub: dict[str, HubService], kind: str, path: str, framing: str
) -> None:
    """50 MB to a body endpoint: refused early, the server's peak memory barely moves."""
    service = hub[kind]
    before = service.peak()
    if framing == "chunked":
        sock, answer = raw_request(service, path, "Transfer-Encoding: chunked\r\n")
    else:  # says 10 bytes, sends 50 MB: the rest is garbage where the next request should be
        sock, answer = raw_request(service, path, "Content-Length: 10\r\n")
    with sock:
        send_until_refused(sock, 50 * MB, chunked=framing == "chunked")
        assert answer.closed.wait(15), "the server kept the connection open"
    assert answer.status is not None and answer.status < 500, answer.data[:300]
    if framing == "chunked":
        assert answer.status == 413 and b"larger than" in answer.data
    grown = service.peak() - before
    assert grown < 20 * MB, f"{kind} peak RSS grew by {grown / MB:.0f} MB"
    assert service.process.poll() is None and "Traceback" not in service.log()


@pytest.mark.parametrize(("kind", "path"), BODY_ENDPOINTS)
def test_declared_big_body_is_refused_before_reading(
    hub: dict[str, HubService], kind: str, path: str
) -> None:
    service = hub[kind]
    sock, answer = raw_request(service, path, f"Content-Length: {300 * MB}\r\n")
    with sock:
        assert answer.closed.wait(10)
    assert answer.status == 413 and b"larger than" in answer.data


@pytest.mark.parametrize(("kind", "path"), BODY_ENDPOINTS)
def test_deep_and_malformed_json_is_a_one_line_400(
    hub: dict[str, HubService], kind: str, path: str
) -> None:
    service = hub[kind]
    limit = {"proxypool": 4096, "accountpool": MB, "demosite": 64 * 1024}[kind]
    depth = min(100_000, limit - 10)
    bodies = [
        b"[" * depth,
        b"[" * (depth // 2) + b"]" * (depth // 2),
        b'{"a":' * (depth // 6) + b"1" + b"}" * (depth // 6),
        b"{",
        b"\xff\xfe",
        b'{"proxy": 5, "token": [], "username": 1, "password": null, "accounts": 7}',
        b'{"latency_ms": NaN, "token": "x", "username": "u"}',
        b"1" * 4400,
    ]
    with httpx.Client(base_url=service.url, headers=headers_for(service), trust_env=False) as c:
        for body in bodies:
            response = c.post(path, content=body)
            assert response.status_code in (400, 401, 404, 413, 422), (body[:40], response.text)
            one_line(response)
    assert "Traceback" not in service.log() and "RecursionError" not in service.log()


def test_deep_json_repro_on_each_service(hub: dict[str, HubService]) -> None:
    """The issue's reproduction: 100,000 ``[`` (within the proxy pool's limit: 4,000)."""
    for kind, path in (
        ("proxypool", "/report"),
        ("accountpool", "/demosite/accounts"),
        ("demosite", "/api/login"),
    ):
        service = hub[kind]
        depth = 4000 if kind == "proxypool" else 60_000 if kind == "demosite" else 100_000
        response = httpx.post(
            service.url + path, content=b"[" * depth, headers=headers_for(service), timeout=10
        )
        assert response.status_code == 400, (kind, response.text)
        one_line(response)
    assert not any("Traceback" in hub[k].log() for k in ("proxypool", "accountpool", "demosite"))


@pytest.fixture
def frozen_hub(own_redis: RedisServer, tmp_path: Path) -> Iterator[dict[str, HubService]]:
    services = {
        kind: start_service(kind, tmp_path, own_redis.url)
        for kind in ("proxypool", "accountpool", "dashboard")
    }
    yield services
    own_redis.process.send_signal(signal.SIGCONT)
    for service in services.values():
        service.stop()


def test_frozen_redis_answers_503_within_2s_then_recovers(
    own_redis: RedisServer, frozen_hub: dict[str, HubService]
) -> None:
    calls = {
        "proxypool": ["/random", "/count", "/health"],
        "accountpool": ["/demosite/random", "/demosite/count", "/health"],
        "dashboard": ["/api/status", "/health"],
    }

    def answers(kind: str, path: str) -> httpx.Response:
        service = frozen_hub[kind]
        return httpx.get(service.url + path, headers=service.headers, timeout=10, trust_env=False)

    assert answers("dashboard", "/api/status").status_code == 200  # connections in the pools
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        for kind, paths in calls.items():
            for path in paths:
                started = time.monotonic()
                response = answers(kind, path)
                took = time.monotonic() - started
                assert response.status_code == 503, (kind, path, response.text)
                assert took < 2.0, f"{kind} {path} took {took:.1f} s"
                assert "did not answer within" in response.text, response.text
                one_line(response)
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    for kind, paths in calls.items():
        for path in paths:
            expected = 503 if path == "/random" and kind == "proxypool" else 200
            if kind == "accountpool" and path.endswith("random"):
                expected = 503  # no credential yet: the empty pool's own 503
            wait_until(
                lambda k=kind, p=path, e=expected: answers(k, p).status_code == e, f"{kind} {path}"
            )
    for service in frozen_hub.values():
        assert "Traceback" not in service.log(), service.log()


def test_wrong_typed_keys_are_a_503_naming_the_key(
    hub: dict[str, HubService], redis_client: redis.Redis
) -> None:
    redis_client.set("proxypool:proxies", "x")
    redis_client.set("credentials:demosite:expiry", "x")
    redis_client.set("accounts:demosite", "x")
    pool, accounts = hub["proxypool"], hub["accountpool"]
    calls = [
        (pool, "GET", "/random", None, "proxypool:proxies"),
        (pool, "GET", "/all", None, "proxypool:proxies"),
        (pool, "GET", "/count", None, "proxypool:proxies"),
        (pool, "POST", "/report", {"proxy": "10.0.0.1:80"}, "proxypool:proxies"),
        (pool, "GET", "/health", None, "proxypool:proxies"),
        (accounts, "GET", "/demosite/random", None, "credentials:demosite:expiry"),
        (accounts, "GET", "/demosite/count", None, "accounts:demosite"),
        (accounts, "GET", "/health", None, "accounts:demosite"),
        (accounts, "POST", "/demosite/accounts", [{"username": "u", "password": "p"}], "accounts"),
        (accounts, "DELETE", "/demosite/accounts/u", None, "accounts:demosite"),
    ]
    try:
        for service, method, path, body, key in calls:
            response = httpx.request(
                method, service.url + path, json=body, headers=service.headers, timeout=10
            )
            assert response.status_code == 503, (path, response.text)
            assert f"{key!r}" in response.text or key in response.text, (path, response.text)
            assert "wrong type" in response.text or "WRONGTYPE" in response.text
            one_line(response)
    finally:
        redis_client.flushall()
    assert "Traceback" not in pool.log() and "Traceback" not in accounts.log()


@pytest.mark.parametrize("kind", ["proxypool", "accountpool", "dashboard", "demosite", "openpool"])
def test_unknown_host_names_are_refused(hub: dict[str, HubService], kind: str) -> None:
    service = hub[kind]
    port = service.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
        response = httpx.get(service.url + "/health", headers={"Host": host}, trust_env=False)
        assert response.status_code in (200, 503), (host, response.text)
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io", "localhost.evil"):
        response = httpx.get(service.url + "/health", headers={"Host": host}, trust_env=False)
        assert response.status_code == 421, (host, response.text)
        assert "unknown Host" in response.text
        one_line(response)


WRITES = {
    "proxypool": "/report",
    "openpool": "/report",
    "accountpool": "/demosite/report",
    "dashboard": "/",
    "demosite": "/api/login",
}


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_cross_site_writes_are_refused(hub: dict[str, HubService], kind: str) -> None:
    service = hub[kind]
    own = f"http://127.0.0.1:{service.port}"
    refused = [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": f"http://localhost:{service.port + 1}"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": own},
    ]
    for extra in refused:
        response = httpx.post(
            service.url + WRITES[kind],
            json={"proxy": "10.0.0.1:80"},
            headers={**service.headers, **extra},
            trust_env=False,
        )
        assert response.status_code == 403, (extra, response.text)
        one_line(response)
    same = httpx.post(
        service.url + WRITES[kind],
        json={"proxy": "10.0.0.1:80"},
        headers={**service.headers, "Origin": own, "Sec-Fetch-Site": "same-origin"},
        trust_env=False,
    )
    assert same.status_code != 403, same.text


def test_cross_origin_form_post_cannot_remove_a_proxy(
    hub: dict[str, HubService], redis_client: redis.Redis
) -> None:
    """The issue's reproduction on the keyless loopback pool, and forms without the key."""
    redis_client.zadd("proxypool:proxies", {"http://10.0.0.1:80": 100})
    form = {"proxy": "10.0.0.1:80", "reason": "banned"}
    pool = hub["openpool"]
    for headers in ({"Origin": "http://evil.example"}, {}):
        response = httpx.post(pool.url + "/report", data=form, headers=headers, trust_env=False)
        assert response.status_code == 403, response.text
    text = httpx.post(pool.url + "/report", content="10.0.0.1:80", trust_env=False)
    assert text.status_code == 403  # no Content-Type: text/plain, what a form can send
    assert redis_client.zscore("proxypool:proxies", "http://10.0.0.1:80") == 100
    for kind in ("proxypool", "accountpool", "dashboard"):
        # a service that requires its key refuses a form without it as any request: 401
        service = hub[kind]
        response = httpx.post(service.url + WRITES[kind], data=form, trust_env=False)
        assert response.status_code in (401, 405), response.text  # 405: no such write
    keyed = hub["proxypool"]
    allowed = httpx.post(keyed.url + "/report", data=form, headers=keyed.headers, trust_env=False)
    assert allowed.status_code == 200 and allowed.json()["removed"] is True


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """True once the server closes ``sock`` (after any answer), within ``seconds``."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


@pytest.mark.parametrize("kind", ["proxypool", "demosite"])
def test_half_open_connections_are_dropped(hub: dict[str, HubService], kind: str) -> None:
    service = hub[kind]
    host = f"Host: 127.0.0.1:{service.port}\r\n"
    silent = socket.create_connection(("127.0.0.1", service.port))
    half_head = socket.create_connection(("127.0.0.1", service.port))
    half_head.sendall(f"GET /health HTTP/1.1\r\n{host}X-Slow: ".encode())
    half_body = socket.create_connection(("127.0.0.1", service.port))
    key = "".join(f"{k}: {v}\r\n" for k, v in service.headers.items())
    half_body.sendall(
        f"POST {WRITES[kind]} HTTP/1.1\r\n{host}{key}Content-Type: application/json\r\n"
        f'Content-Length: 100\r\n\r\n{{"proxy":'.encode()
    )
    idle = socket.create_connection(("127.0.0.1", service.port))
    idle.sendall(f"GET /health HTTP/1.1\r\n{host}\r\n".encode())
    started = time.monotonic()
    head_limit = service_http.HEADER_TIMEOUT + 3
    assert _closed_within(silent, head_limit), "a silent connection stayed open"
    assert _closed_within(half_head, head_limit - (time.monotonic() - started))
    assert _closed_within(idle, service_http.KEEP_ALIVE_TIMEOUT + 3)
    body_limit = service_http.BODY_TIMEOUT + 3 - (time.monotonic() - started)
    half_body.settimeout(body_limit)
    answer = b""
    try:
        while chunk := half_body.recv(65536):
            answer += chunk
    except TimeoutError:
        pytest.fail("a half-sent body kept the connection open")
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    for sock in (silent, half_head, half_body, idle):
        sock.close()
    if service.api_key:  # refused before its body is read: answered and closed at once
        with socket.create_connection(("127.0.0.1", service.port)) as anonymous:
            anonymous.sendall(
                f"POST /report HTTP/1.1\r\n{host}Content-Length: 100\r\n\r\n{{".encode()
            )
            assert _closed_within(anonymous, 3), "a refused request kept its connection"
    assert "Traceback" not in service.log()


@pytest.mark.parametrize(
    "value", ["1e308", "1e400", "Infinity", "NaN", "-1", "60001", '"5"', "true", "[]"]
)
def test_demosite_refuses_absurd_latency(hub: dict[str, HubService], value: str) -> None:
    site = hub["demosite"]
    response = httpx.post(
        site.url + "/api/admin/config",
        content=f'{{"latency_ms": {value}}}',
        headers={"X-Admin-Secret": ADMIN_SECRET},
    )
    assert response.status_code == 400, response.text
    one_line(response)
    current = httpx.get(site.url + "/api/admin/config", headers={"X-Admin-Secret": ADMIN_SECRET})
    assert current.json()["latency_ms"] == 0


def test_demosite_stops_promptly_with_a_large_latency(tmp_path: Path) -> None:
    site = start_service("demosite", tmp_path, "")
    admin = {"X-Admin-Secret": ADMIN_SECRET}
    configured = httpx.post(
        site.url + "/api/admin/config", json={"latency_ms": 60000}, headers=admin
    )
    assert configured.status_code == 200 and configured.json()["latency_ms"] == 60000
    answers: list[httpx.Response | Exception] = []

    def slow_request() -> None:
        try:
            answers.append(httpx.get(site.url + "/ip", timeout=90))
        except httpx.HTTPError as exc:
            answers.append(exc)

    thread = threading.Thread(target=slow_request, daemon=True)
    thread.start()
    wait_until(lambda: "ESTAB" in _connections(site.port), "the slow request to arrive", 10)
    started = time.monotonic()
    code = site.stop(timeout=service_http.GRACEFUL_SHUTDOWN + 5)
    took = time.monotonic() - started
    assert code in (0, -signal.SIGTERM), site.log()
    assert took < service_http.GRACEFUL_SHUTDOWN + 3, f"stopping took {took:.1f} s"
    thread.join(10)
    assert answers and (isinstance(answers[0], Exception) or answers[0].status_code == 503)
    assert "Traceback" not in site.log(), site.log()


def _connections(port: int) -> str:
    """``ESTAB`` when a client connection to ``port`` is established (from /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "01":
            return "ESTAB"
    return ""


@pytest.mark.parametrize("delete_path", ["team/alice", "team%2Falice"])
def test_account_names_with_a_slash_can_be_added_and_deleted(
    hub: dict[str, HubService], redis_url: str, delete_path: str
) -> None:
    pool = hub["accountpool"]
    added = httpx.post(
        pool.url + "/demosite/accounts",
        json=[{"username": "team/alice", "password": "pw-slash"}],
        headers=pool.headers,
    )
    assert added.status_code == 200 and added.json()["added"] == 1, added.text
    assert httpx.get(pool.url + "/demosite/count", headers=pool.headers).json()["accounts"] == 1
    deleted = httpx.delete(pool.url + f"/demosite/accounts/{delete_path}", headers=pool.headers)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"site": "demosite", "removed": "team/alice"}
    assert httpx.get(pool.url + "/demosite/count", headers=pool.headers).json()["accounts"] == 0

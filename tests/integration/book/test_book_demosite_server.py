"""The demo site as a real server process: tokens, expiry, per-address bans, bad flags."""

from __future__ import annotations

import subprocess

import httpx
from book_lab import ACCOUNTS, ADMIN_SECRET, BIN, Lab

from crawlfleet.demosite.config import BAN_PAGE_MARKER


def client_from(address: str) -> httpx.Client:
    """A client whose connections leave from ``address`` (a distinct loopback source)."""
    return httpx.Client(
        transport=httpx.HTTPTransport(local_address=address), trust_env=False, timeout=5
    )


def login(client: httpx.Client, site: str) -> dict[str, str]:
    user, password = next(iter(ACCOUNTS.items()))
    resp = client.post(f"{site}/api/login", json={"username": user, "password": password})
    resp.raise_for_status()
    return {"Authorization": f"jwt {resp.json()['token']}"}


def test_site_rejects_missing_and_expired_tokens(lab: Lab) -> None:
    site = lab.start_demosite("--token-ttl", "60", books=20)
    with client_from("127.0.0.1") as client:
        assert client.get(f"{site}/api/book/").status_code == 401
        headers = login(client, site)
        body = client.get(f"{site}/api/book/?limit=18&offset=18", headers=headers).json()
        assert body["count"] == 20 and len(body["results"]) == 2
        lab.admin("/api/admin/clock", {"advance_seconds": 61})  # the site's time, not a sleep
        resp = client.get(f"{site}/api/book/", headers=headers)
        assert resp.status_code == 401
        assert resp.json() == {"detail": "token expired"}
        bad = client.post(f"{site}/api/login", json={"username": "reader1", "password": "x"})
        assert bad.status_code == 401


def test_site_bans_a_busy_address_only(lab: Lab) -> None:
    site = lab.start_demosite(
        "--rate-limit",
        "10",
        "--rate-window",
        "30",
        "--ban-seconds",
        "1.5",
        "--ban-status",
        "429",
        books=20,
    )
    with client_from("127.0.0.2") as busy, client_from("127.0.0.3") as calm:
        headers = login(busy, site)  # 1 request
        codes = [busy.get(f"{site}/api/book/", headers=headers).status_code for _ in range(11)]
        assert codes == [200] * 9 + [429] * 2
        banned = busy.get(f"{site}/api/book/", headers=headers)
        assert banned.status_code == 429 and int(banned.headers["Retry-After"]) >= 1
        assert busy.get(f"{site}/ip").status_code == 429
        assert calm.get(f"{site}/ip").json() == {"origin": "127.0.0.3"}
        assert calm.get(f"{site}/api/book/", headers=headers).status_code == 200
        assert lab.admin("/api/admin/stats")["banned"] == ["127.0.0.2"]
        lab.admin("/api/admin/clock", {"advance_seconds": 1.6})  # the ban ends: no sleep
        assert busy.get(f"{site}/api/book/", headers=headers).status_code == 200


def test_a_soft_ban_is_a_page_only_its_text_reveals(lab: Lab) -> None:
    site = lab.start_demosite(
        *("--rate-limit", "2", "--rate-window", "30", "--ban-seconds", "30"),
        *("--ban-status", "200"),
        books=20,
    )
    with client_from("127.0.0.2") as busy:
        headers = login(busy, site)  # 1 request
        answers = [busy.get(f"{site}/api/book/", headers=headers) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert "results" in answers[0].json()
    banned = answers[2]
    assert BAN_PAGE_MARKER in banned.text and "Retry-After" not in banned.headers
    assert banned.headers["content-type"].startswith("text/html")


def test_bad_flags_exit_2_with_one_line() -> None:
    for argv, needle in (
        (["--ban-status", "500"], "--ban-status must be 403, 429 or 200 (a ban page)"),
        (["--accounts", "nopassword"], "--accounts: expected user:password"),
        (["--jwt-secret", "short"], "--jwt-secret must be at least 32 bytes"),
        (["--workers", "0"], "--workers/DEMOSITE_WORKERS must be an integer between 1 and 64"),
    ):
        proc = subprocess.run(
            [str(BIN / "crawlfleet"), "demosite", *argv], capture_output=True, text=True
        )
        assert proc.returncode == 2
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("crawlfleet demosite: error: ") and needle in last


def test_site_clock_moves_only_forward_by_sane_steps(lab: Lab) -> None:
    lab.start_demosite(books=5)
    url = f"{lab.site_url}/api/admin/clock"
    headers = {"X-Admin-Secret": ADMIN_SECRET}
    for bad in (
        {"advance_seconds": 0},
        {"advance_seconds": -5},
        {"advance_seconds": 1e308},
        {"advance_seconds": "60"},
        {"advance_seconds": True},
        {"advance_seconds": 60, "x": 1},
        [],
    ):
        resp = httpx.post(url, json=bad, headers=headers, trust_env=False)
        assert resp.status_code == 400, (bad, resp.text)
        assert "advance_seconds" in resp.json()["detail"]
    assert httpx.get(url, headers=headers, trust_env=False).json() == {"offset_seconds": 0.0}
    assert lab.admin("/api/admin/clock", {"advance_seconds": 90}) == {"offset_seconds": 90.0}
    assert httpx.post(url, json={"advance_seconds": 1}, trust_env=False).status_code == 403

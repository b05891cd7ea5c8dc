"""Demo site in-process (Starlette's TestClient): catalogue, login, tokens, bans, admin API."""

from __future__ import annotations

import time

import jwt
import pytest
from starlette.testclient import TestClient

from crawlfleet.demosite.app import create_app
from crawlfleet.demosite.catalogue import Catalogue
from crawlfleet.demosite.config import ConfigError, SiteConfig, parse_accounts

SECRET = "test-secret-of-at-least-32-bytes!"


def make_client(**overrides: object) -> TestClient:
    params: dict[str, object] = {
        "books": 40,
        "page_size": 18,
        "jwt_secret": SECRET,
        "admin_secret": "adm",
        "accounts": {"alice": "pw1", "bob": "pw2"},
    }
    params.update(overrides)
    return TestClient(create_app(SiteConfig(**params)))  # type: ignore[arg-type]


def login(client: TestClient, user: str = "alice", password: str = "pw1") -> dict[str, str]:
    resp = client.post("/api/login", json={"username": user, "password": password})
    assert resp.status_code == 200, resp.text
    return {"Authorization": f"jwt {resp.json()['token']}"}


def test_catalogue_is_deterministic_and_distinct() -> None:
    a, b = Catalogue(300, seed=3), Catalogue(300, seed=3)
    assert a.ids == b.ids
    assert len(set(a.ids)) == 300
    assert a.book(a.ids[5]) == b.book(b.ids[5])
    assert Catalogue(300, seed=4).ids != a.ids
    assert a.page(290, 18) == [a.summary(i) for i in a.ids[290:]]
    with pytest.raises(KeyError):
        a.book("nope")


def test_list_pages_cover_the_catalogue() -> None:
    client = make_client()
    headers = login(client)
    seen = []
    for offset in range(0, 40, 18):
        body = client.get(f"/api/book/?limit=18&offset={offset}", headers=headers).json()
        assert body["count"] == 40
        seen += [r["id"] for r in body["results"]]
    assert len(seen) == len(set(seen)) == 40
    detail = client.get(f"/api/book/{seen[0]}/", headers=headers).json()
    fields = {
        "id",
        "name",
        "authors",
        "translators",
        "publisher",
        "published_at",
        "isbn",
        "price",
        "page_number",
        "score",
        "tags",
        "cover",
        "catalog",
        "introduction",
        "comments",
    }
    assert set(detail) == fields
    assert client.get("/api/book/42/", headers=headers).status_code == 404


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "offset=-1", "limit=x"])
def test_list_rejects_bad_paging(query: str) -> None:
    client = make_client()
    resp = client.get(f"/api/book/?{query}", headers=login(client))
    assert resp.status_code == 400
    assert "limit" in resp.json()["detail"]


def test_missing_bad_and_expired_tokens_are_401() -> None:
    client = make_client()
    assert client.get("/api/book/").status_code == 401
    assert client.get("/api/book/", headers={"Authorization": "Bearer x"}).status_code == 401
    assert client.get("/api/book/", headers={"Authorization": "jwt garbage"}).status_code == 401
    forged = jwt.encode(
        {"sub": "alice", "exp": time.time() + 60},
        "another-secret-of-at-least-32-bytes",
        algorithm="HS256",
    )
    assert client.get("/api/book/", headers={"Authorization": f"jwt {forged}"}).status_code == 401
    expired = jwt.encode({"sub": "alice", "exp": time.time() - 1}, SECRET, algorithm="HS256")
    resp = client.get("/api/book/", headers={"Authorization": f"jwt {expired}"})
    assert resp.status_code == 401
    assert resp.json() == {"detail": "token expired"}


def test_login_rejects_bad_credentials_and_bodies() -> None:
    client = make_client()
    for user, password in (("alice", "no"), ("eve", "pw1")):
        resp = client.post("/api/login", json={"username": user, "password": password})
        assert resp.status_code == 401
    assert client.post("/api/login", content=b"not json").status_code == 400
    assert client.post("/api/login", json=["alice"]).status_code == 400
    assert client.post("/api/login", json={"username": 1, "password": "x"}).status_code == 400
    token = login(client)["Authorization"].split()[1]
    claims = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert claims["sub"] == "alice"
    assert claims["exp"] - claims["iat"] == 3600


def test_revocation_by_token_user_and_all() -> None:
    client = make_client()
    admin = {"X-Admin-Secret": "adm"}
    a1, a2, b1 = login(client), login(client), login(client, "bob", "pw2")
    token = a1["Authorization"].split()[1]
    assert client.post("/api/admin/revoke", json={"token": token}, headers=admin).status_code == 200
    assert client.get("/api/book/", headers=a1).json() == {"detail": "token revoked"}
    assert client.get("/api/book/", headers=a2).status_code == 200
    client.post("/api/admin/revoke", json={"username": "alice"}, headers=admin)
    assert client.get("/api/book/", headers=a2).status_code == 401
    assert client.get("/api/book/", headers=b1).status_code == 200
    a3 = login(client)  # issued after the cut-off: valid
    assert client.get("/api/book/", headers=a3).status_code == 200
    client.post("/api/admin/revoke", json={"all": True}, headers=admin)
    assert client.get("/api/book/", headers=b1).status_code == 401
    assert client.get("/api/book/", headers=a3).status_code == 401


def test_admin_api_needs_its_secret() -> None:
    client = make_client()
    assert client.post("/api/admin/revoke", json={"all": True}).status_code == 403
    bad = client.post("/api/admin/revoke", json={"x": 1}, headers={"X-Admin-Secret": "adm"})
    assert bad.status_code == 400
    assert make_client(admin_secret="").post("/api/admin/revoke", json={}).status_code == 404


def test_busy_address_is_banned_then_released() -> None:
    client = make_client(rate_limit=3, rate_window=60, ban_seconds=0.3, ban_status=429)
    headers = login(client)  # the login counts too
    codes = [client.get("/api/book/", headers=headers).status_code for _ in range(4)]
    assert codes == [200, 200, 429, 429]
    assert client.get("/ip").status_code == 429
    assert client.get("/health").status_code == 200
    stats = client.get("/api/admin/stats", headers={"X-Admin-Secret": "adm"}).json()
    assert stats["bans"] == 1 and stats["banned"] == ["testclient"]
    assert stats["book_requests"] == {"testclient": 2}
    advanced = client.post(  # the site's clock, not a sleep
        "/api/admin/clock", json={"advance_seconds": 0.35}, headers={"X-Admin-Secret": "adm"}
    )
    assert advanced.status_code == 200
    assert client.get("/api/book/", headers=headers).status_code == 200
    assert client.get("/ip").json() == {"origin": "testclient"}


@pytest.mark.parametrize(
    ("params", "flag"),
    [
        ({"books": -1}, "--books"),
        ({"page_size": 0}, "--page-size"),
        ({"token_ttl": 0}, "--token-ttl"),
        ({"jwt_secret": "short"}, "--jwt-secret"),
        ({"rate_limit": -1}, "--rate-limit"),
        ({"rate_window": 0}, "--rate-window"),
        ({"ban_status": 500}, "--ban-status"),
        ({"latency_ms": -5}, "--latency-ms"),
    ],
)
def test_config_errors_name_the_flag(params: dict[str, object], flag: str) -> None:
    base: dict[str, object] = {"jwt_secret": SECRET}
    base.update(params)
    with pytest.raises(ConfigError, match=flag):
        SiteConfig(**base)  # type: ignore[arg-type]


def test_parse_accounts(tmp_path) -> None:
    assert parse_accounts("a:1, b:2") == {"a": "1", "b": "2"}
    path = tmp_path / "accounts.txt"
    path.write_text("# team\nc:3\n\nd:4\n")
    assert parse_accounts(f"@{path}") == {"c": "3", "d": "4"}
    assert parse_accounts(str(path)) == {"c": "3", "d": "4"}
    for bad in ("nopassword", "a:", ":b", ""):
        with pytest.raises(ConfigError, match="--accounts"):
            parse_accounts(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        parse_accounts(f"@{tmp_path / 'missing'}")


def test_admin_config_changes_limits_while_running() -> None:
    client = make_client()
    admin = {"X-Admin-Secret": "adm"}
    headers = login(client)
    config = client.get("/api/admin/config", headers=admin).json()
    assert config == {
        "rate_limit": 0,
        "rate_window": 1.0,
        "ban_seconds": 10.0,
        "ban_status": 403,
        "latency_ms": 0.0,
    }
    changed = client.post(
        "/api/admin/config", json={"rate_limit": 1, "rate_window": 60}, headers=admin
    )
    assert changed.json()["rate_limit"] == 1
    codes = [client.get("/api/book/", headers=headers).status_code for _ in range(2)]
    assert codes == [200, 403]
    assert client.delete("/api/admin/stats", headers=admin).json()["banned"] == []
    client.post("/api/admin/config", json={"rate_limit": 0}, headers=admin)
    assert client.get("/api/book/", headers=headers).status_code == 200
    for bad, message in (
        ({"ban_status": 500}, "--ban-status"),
        ({"rate_limit": "x"}, "must be a number"),
        ({"rate_limit": 1.5}, "must be a number"),
        ({"books": 3}, "some of"),
        ({}, "some of"),
    ):
        resp = client.post("/api/admin/config", json=bad, headers=admin)
        assert resp.status_code == 400 and message in resp.json()["detail"]
    assert client.get("/api/admin/config", headers=admin).json()["rate_limit"] == 0
    assert client.get("/api/admin/config").status_code == 403

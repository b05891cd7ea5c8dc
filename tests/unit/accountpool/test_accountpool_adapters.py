"""Site adapters: the configurable JSON adapter's settings, templates, and plug-in loading."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt
import pytest

from crawlfleet.accountpool.adapters import (
    ENTRY_POINT_GROUP,
    JsonLoginAdapter,
    _dig,
    _render,
    build_adapter,
    jwt_expiry,
)
from crawlfleet.accountpool.sites import DEFAULT_SITES, SiteConfigError, SiteSpec


def spec(**options: Any) -> SiteSpec:
    base = {k: v for k, v in DEFAULT_SITES["demosite"].items() if k not in ("adapter", "base_url")}
    base.update(options)
    return SiteSpec("s", "json", "http://127.0.0.1:8000", base)


def test_demosite_adapter_from_defaults() -> None:
    adapter = build_adapter(spec())
    assert isinstance(adapter, JsonLoginAdapter)
    assert adapter.login_url == "http://127.0.0.1:8000/api/login"
    assert adapter.check_url == "http://127.0.0.1:8000/api/book/?limit=1&offset=0"
    assert adapter.header("abc") == ("Authorization", "jwt abc")


def test_base_url_with_path_prefix() -> None:
    adapter = JsonLoginAdapter(
        SiteSpec(
            "s",
            "json",
            "http://h/app",
            {"login": {"url": "api/login", "token_path": "t"}, "check": {"url": "api/me"}},
        )
    )
    assert adapter.login_url == "http://h/app/api/login"
    assert adapter.check_url == "http://h/app/api/me"


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"login": "x"}, "sites.s.login: expected a mapping"),
        ({"login": {"token_path": "t"}}, "sites.s.login.url"),
        ({"login": {"url": "/l"}}, "exactly one of token_path or token_cookie"),
        ({"login": {"url": "/l", "token_path": "t", "token_cookie": "c"}}, "exactly one"),
        ({"login": {"url": "/l", "token_path": ""}}, "sites.s.login.token_path"),
        ({"login": {"url": "/l", "token_path": "t", "body_format": "xml"}}, "body_format"),
        (
            {"login": {"url": "/l", "token_path": "t", "body_format": "form", "body": [1]}},
            "form body",
        ),
        ({"login": {"url": "/l", "token_path": "t", "rejected_status": [99]}}, "rejected_status"),
        ({"login": {"url": "/l", "token_path": "t", "rejected_status": 401}}, "rejected_status"),
        ({"header": {"format": "Bearer"}}, "{token}"),
        ({"check": {}}, "sites.s.check.url"),
        ({"check": {"url": "/c", "ok_status": [200, 401]}}, "overlap"),
        ({"token_ttl": 0}, "token_ttl"),
        ({"token_ttl": True}, "token_ttl"),
        ({"tokne_ttl": 5}, "unknown setting(s) tokne_ttl"),
    ],
)
def test_bad_adapter_settings_name_the_setting(options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(SiteConfigError) as info:
        build_adapter(spec(**options))
    assert fragment in str(info.value)


def test_render_fills_strings_only_and_keeps_other_braces() -> None:
    template = {"u": "{username}", "p": "{password}", "n": [1, "x{username}y"], "k": "{other}"}
    assert _render(template, "al{ice", "p}w") == {
        "u": "al{ice",
        "p": "p}w",
        "n": [1, "xal{icey"],
        "k": "{other}",
    }


def test_dig() -> None:
    data = {"data": {"items": [{"token": "t"}]}}
    assert _dig(data, "data.items.0.token") == "t"
    assert _dig(data, "data.items.5.token") is None
    assert _dig(data, "missing") is None


def test_jwt_expiry() -> None:
    exp = int(time.time()) + 100
    assert jwt_expiry(jwt.encode({"exp": exp}, "k" * 32, algorithm="HS256")) == exp
    assert jwt_expiry(jwt.encode({"sub": "x"}, "k" * 32, algorithm="HS256")) is None
    assert jwt_expiry("opaque-session-token") is None


def test_unknown_adapter_lists_available() -> None:
    with pytest.raises(SiteConfigError, match=r"no adapter 'nope'.*available: .*json"):
        build_adapter(SiteSpec("s", "nope", "http://h", {}))


PLUGIN = """
class Adapter:
    def __init__(self, spec):
        self.name = spec.name
        self.greeting = spec.options["greeting"]

    def header(self, token):
        return "X-Token", token

    async def login(self, client, username, password):
        raise NotImplementedError

    async def check(self, client, token):
        raise NotImplementedError


class Broken:
    def __init__(self, spec):
        self.name = spec.name


def explode(spec):
    raise RuntimeError("boom")
"""


def install_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real installed distribution (dist-info on sys.path) declaring entry points."""
    (tmp_path / "ap_test_plugin.py").write_text(PLUGIN)
    info = tmp_path / "ap_test_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ap-test-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nshop = ap_test_plugin:Adapter\n"
        "broken = ap_test_plugin:Broken\nmissing = ap_test_plugin:Nothing\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def test_plugin_adapter_from_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_plugin(tmp_path, monkeypatch)
    adapter = build_adapter(SiteSpec("shop", "shop", "http://h", {"greeting": "hi"}))
    assert type(adapter).__name__ == "Adapter"
    assert adapter.header("t") == ("X-Token", "t")
    with pytest.raises(SiteConfigError, match="has no login"):
        build_adapter(SiteSpec("shop", "broken", "http://h", {}))
    with pytest.raises(SiteConfigError, match="cannot load plug-in 'missing'"):
        build_adapter(SiteSpec("shop", "missing", "http://h", {}))

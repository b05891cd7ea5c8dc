"""Bad input to the operator pieces: seed entries, dashboard settings, auth, the extension."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler
from starlette.requests import Request

from crawlfleet.cli import main
from crawlfleet.dashboard.config import ConfigError, build_parser, resolve
from crawlfleet.dashboard.core import _authorized, content_security_policy, page_html
from crawlfleet.extensions.workerstats import WorkerStats, numeric_stats
from crawlfleet.jobs.seeding import check_entry


@pytest.mark.parametrize(
    "entry",
    ["http://127.0.0.1:8000/a?b=1", "https://example.org/", '{"url": "http://h/x", "meta": {}}'],
)
def test_good_seed_entries(entry: str) -> None:
    assert check_entry(entry)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("example.org/a", "not an http"),
        ("ftp://h/x", "not an http"),
        ("http://h:99999/", "not a valid URL"),
        ("http://h/a b", "spaces"),
        ("{not json", "invalid JSON"),
        ('{"href": "http://h/"}', '"url" string'),
        ('{"url": "mailto:x@h"}', '"url"'),
    ],
)
def test_bad_seed_entries(entry: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_entry(entry)


def _settings(*argv: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    environ = env or {}
    return resolve(build_parser(environ).parse_args(list(argv)), environ)


def test_dashboard_defaults_and_environment() -> None:
    s = _settings()
    assert (s.host, s.port, s.api_key, s.sample_interval, s.refresh) == (
        "127.0.0.1",
        8060,
        "",
        10,
        2,
    )
    env = {
        "DASHBOARD_PORT": "9000",
        "DASHBOARD_API_KEY": "dashboard-key-0123456789",
        "DASHBOARD_SPIDERS": "book, site",
        "PROXYPOOL_URL": "http://hub:5555",
        "PROXYPOOL_API_KEY": "pk",
    }
    s = _settings("--host", "10.0.0.5", env=env)
    assert (s.port, s.api_key, s.spiders) == (9000, env["DASHBOARD_API_KEY"], ("book", "site"))
    assert s.pools.proxypool_api_key == "pk"
    assert _settings("--port", "9001", env=env).port == 9001


def test_dashboard_refuses_an_exposed_bind_without_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="refusing to listen on non-loopback"):
        _settings("--host", "0.0.0.0")
    assert _settings("--host", "0.0.0.0", "--allow-no-api-key").insecure_no_api_key
    env = {"DASHBOARD_ALLOW_NO_API_KEY": "1"}
    assert _settings("--host", "::", env=env).host == "::"
    assert _settings("--host", "::1").host == "::1"
    key = tmp_path / "key"
    key.write_text("from-file-0123456789\n")
    assert (
        _settings("--host", "0.0.0.0", "--api-key-file", str(key)).api_key == "from-file-0123456789"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "0"], "--port"),
        (["--port", "x"], "--port"),
        (["--redis-url", "localhost:6379"], "--redis-url"),
        (["--sample-interval", "0"], "--sample-interval"),
        (["--refresh", "nan"], "--refresh"),
        (["--proxypool-url", "hub:5555"], "--proxypool-url"),
        (["--api-key-file", "/nonexistent/key"], "cannot read"),
    ],
)
def test_dashboard_bad_settings(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _settings(*argv)


def test_dashboard_empty_key_file(tmp_path: Path) -> None:
    empty = tmp_path / "key"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        _settings("--api-key-file", str(empty))


def test_dashboard_cli_exits_2_on_bad_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--host", "192.0.2.7", "--redis-url", "redis://h/0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("crawlfleet dashboard: error: refusing")


def _request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "headers": raw, "method": "GET", "path": "/"})


def test_api_key_or_basic_auth() -> None:
    def basic(text: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(text.encode()).decode()}

    assert _authorized(_request({"X-API-Key": "k"}), "k")
    assert not _authorized(_request({"X-API-Key": "kk"}), "k")
    assert not _authorized(_request({}), "k")
    assert _authorized(_request(basic("anyone:k")), "k")
    assert _authorized(_request(basic(":k")), "k")
    assert not _authorized(_request(basic("k:")), "k")
    assert not _authorized(_request({"Authorization": "Basic !!"}), "k")
    assert not _authorized(_request({"Authorization": "Bearer k"}), "k")
    # A wrong X-API-Key is not rescued by a right basic password.
    assert not _authorized(_request({"X-API-Key": "no", **basic("u:k")}), "k")


def test_page_loads_nothing_from_elsewhere() -> None:
    html = page_html(1.5)
    assert "const REFRESH_MS = 1500;" in html
    assert "{{" not in html
    for marker in ("<script src", '<link rel="stylesheet"', "@import", "https://"):
        assert marker not in html
    assert html.count("http://") == 1  # the SVG namespace
    csp = content_security_policy(html)
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert "unsafe" not in csp
    assert csp.count("'sha256-") == 2  # one inline script, one inline style
    assert content_security_policy(page_html(3)) != csp  # the hash covers the templated script


def test_numeric_stats_keep_numbers_only() -> None:
    stats = {"a": 1, "b": 2.5, "c": "text", "d": True, "e": float("inf"), "f": None}
    assert numeric_stats(stats) == ["a", "1", "b", "2.5"]


def test_extension_settings() -> None:
    with pytest.raises(NotConfigured):
        WorkerStats.from_crawler(get_crawler(settings_dict={"WORKERSTATS_ENABLED": False}))
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ValueError, match="WORKERSTATS_INTERVAL"):
            WorkerStats.from_crawler(get_crawler(settings_dict={"WORKERSTATS_INTERVAL": bad}))
    ext = WorkerStats.from_crawler(
        get_crawler(settings_dict={"WORKERSTATS_INTERVAL": 5, "WORKERSTATS_HISTORY": 60})
    )
    assert ext.cap == 13


def test_commands_reject_bad_flags_with_status_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert main(["status", "--watch", "--interval", "0", "--redis-url", "redis://h/0"]) == 2
    assert "--interval must be > 0" in capsys.readouterr().err
    assert main(["seed", "book", "nope", "--redis-url", "redis://h/0"]) == 2
    assert "argument 1" in capsys.readouterr().err
    assert main(["pause", "book"]) == 2
    assert "no Redis URL" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["purge"])
    assert exit_info.value.code == 2

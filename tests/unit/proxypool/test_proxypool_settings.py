"""Settings from flags and PROXYPOOL_* variables; bad configuration exits 2 with one line."""

from __future__ import annotations

import argparse
import os
import re

import pytest

from crawlfleet.proxypool import cli
from crawlfleet.proxypool.config import (
    OPTIONS,
    ConfigError,
    Settings,
    add_arguments,
    describe,
    resolve,
)
from crawlfleet.proxypool.sources import load_plugins

KEY = "proxypool-unit-key-0123"


def settings_from(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return resolve(parser.parse_args(argv), env or {})


def test_defaults() -> None:
    settings = settings_from([])
    assert settings == Settings()
    assert (settings.host, settings.port, settings.api_key) == ("127.0.0.1", 5555, None)
    assert settings.test_statuses == frozenset({200})


def test_every_option_has_a_proxypool_variable_or_redis_url() -> None:
    for opt in OPTIONS:
        assert opt.env == "REDIS_URL" or opt.env.startswith("PROXYPOOL_"), opt
        assert opt.flag.startswith("--")


def test_environment_then_flag_precedence() -> None:
    env = {
        "PROXYPOOL_PORT": "6000",
        "PROXYPOOL_FETCH_INTERVAL": "2.5",
        "PROXYPOOL_TEST_STATUS": "200, 301-302",
        "PROXYPOOL_PROXIES": "1.2.3.4:80, http://u:p@5.6.7.8:3128\n9.9.9.9:1",
        "PROXYPOOL_ANONYMITY_CHECK": "yes",
        "PROXYPOOL_TEST_LOOP": "false",
        "REDIS_URL": "redis://:pw@hub:6379/1",
    }
    settings = settings_from(["--port", "7000", "--proxy", "4.4.4.4:8"], env)
    assert settings.port == 7000
    assert settings.fetch_interval == 2.5
    assert settings.test_statuses == frozenset({200, 301, 302})
    assert settings.proxies == ("http://4.4.4.4:8",)  # the flag replaces the variable
    assert settings.anonymity_check is True
    assert settings.test_loop is False
    assert settings.redis_url == "redis://:pw@hub:6379/1"
    assert settings_from([], env).proxies == (
        "http://1.2.3.4:80",
        "http://u:p@5.6.7.8:3128",
        "http://9.9.9.9:1",
    )
    assert settings_from(["--no-fetch"], {"PROXYPOOL_FETCH_LOOP": "1"}).fetch_loop is False


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--port", "0"], {}, "--port/PROXYPOOL_PORT must be an integer between 1 and 65535"),
        (
            [],
            {"PROXYPOOL_PORT": "http"},
            "PROXYPOOL_PORT must be an integer between 1 and 65535, got 'http'",
        ),
        (["--test-interval", "-1"], {}, "greater than 0"),
        (["--test-interval", "nan"], {}, "greater than 0"),
        ([], {"PROXYPOOL_FETCH_INTERVAL": "soon"}, "PROXYPOOL_FETCH_INTERVAL"),
        (["--test-url", "not a url"], {}, "must be an http:// or https:// URL"),
        (["--test-url", "ftp://x/"], {}, "must be an http:// or https:// URL"),
        (["--test-url", "http://h:99999/"], {}, "is not a valid URL"),
        (["--redis-url", "localhost:6379"], {}, "redis://"),
        (["--test-status", "abc"], {}, "not a status code"),
        (["--test-status", "700"], {}, "outside 100-599"),
        (["--test-status", ","], {}, "at least one status"),
        (["--score-step", "0"], {}, "between 1 and 100"),
        (["--score-step", "101"], {}, "between 1 and 100"),
        (["--test-concurrency", "0"], {}, "between 1 and 10000"),
        (["--max-size", "-5"], {}, "PROXYPOOL_MAX_SIZE"),
        (["--max-count", "1e6"], {}, "--max-count"),
        (["--proxy", "nonsense"], {}, "item 'nonsense' is not a proxy"),
        (["--source-url", "http://x/?key=SECRET", "--source-url", "file:///etc"], {}, "file:"),
        ([], {"PROXYPOOL_ANONYMITY_CHECK": "perhaps"}, "true or false"),
        (["--log-format", "xml"], {}, "kv, json"),
        (["--api-key", " "], {}, "--api-key is refused: a flag shows the key to every user in ps"),
        ([], {"PROXYPOOL_API_KEY": "k"}, "too short: use at least 16 characters"),
    ],
)
def test_bad_values_name_flag_and_variable(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        settings_from(argv, env)
    assert "\n" not in str(info.value)


def test_secrets_never_appear_in_errors() -> None:
    with pytest.raises(ConfigError) as info:
        settings_from(["--proxy", "http://user:hunter2@1.2.3.4:80/x"])
    assert "hunter2" not in str(info.value)
    with pytest.raises(ConfigError) as info:
        settings_from(["--source-url", "http://x/?key=hunter2", "--source-url", "nope"])
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "hub.example", "::"])
def test_non_loopback_needs_an_api_key(host: str) -> None:
    with pytest.raises(ConfigError, match="without an API key"):
        settings_from(["--host", host])
    assert settings_from(["--host", host], {"PROXYPOOL_API_KEY": KEY}).api_key == KEY
    assert settings_from(["--host", host, "--insecure-no-api-key"]).host == host
    assert settings_from([], {"PROXYPOOL_HOST": host, "PROXYPOOL_INSECURE_NO_API_KEY": "1"})


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.4.5", "localhost", "::1"])
def test_loopback_needs_no_key(host: str) -> None:
    assert settings_from(["--host", host]).host == host


def test_describe_masks_secrets() -> None:
    shown = describe(
        settings_from(
            [
                "--redis-url",
                "redis://:pw123@hub:6379/0",
                "--proxy",
                "http://u:pw456@1.2.3.4:80",
                "--source-url",
                "https://provider.example/list?apikey=pw789",
            ],
            {"PROXYPOOL_API_KEY": "topsecret-topsecret"},
        )
    )
    text = repr(shown)
    for secret in ("topsecret", "pw123", "pw456", "pw789"):
        assert secret not in text
    assert shown["source_urls"] == ["https://provider.example/list"]


def test_unknown_plugin_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown source plug-in 'nope' \(installed: "):
        load_plugins(["nope"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--host", "0.0.0.0"], "refusing to listen on non-loopback address '0.0.0.0'"),
        (["serve", "--port", "70000"], "--port/PROXYPOOL_PORT must be"),
        (["serve", "--redis-url", "http://x"], "--redis-url/REDIS_URL must look like redis://"),
        (["serve", "--redis-url", "redis://127.0.0.1:1/0"], "needs --test-url"),
        (["fetch", "--once", "--source-plugin", "missing"], "unknown source plug-in"),
        (["test", "--once"], "needs --test-url"),
    ],
)
def test_cli_exits_2_with_one_line(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [k for k in os.environ if k.startswith("PROXYPOOL_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"crawlfleet proxypool {argv[0]}: error: ")
    assert message in err
    assert "\n" not in err


def test_cli_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["serve", "--bogus"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        cli.main([])
    assert info.value.code == 2

"""Settings from flags and environment: defaults, secrets kept off the command line, refusals."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.accountpool.cli import build_parser, main
from crawlfleet.accountpool.config import ConfigError, Settings, settings_from_args
from crawlfleet.accountpool.crypto import generate_key

KEY = generate_key()
API_KEY = "k" * 20


def settings(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    environ = {"ACCOUNTPOOL_SECRET_KEY": KEY, **(env or {})}
    return settings_from_args(build_parser(environ).parse_args(argv), environ)


def error(argv: list[str], env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        settings(argv, env)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults() -> None:
    s = settings(["serve"])
    assert (s.host, s.port, s.api_key) == ("127.0.0.1", 6777, None)
    assert s.redis_url == "redis://127.0.0.1:6379/0"
    assert list(s.adapters) == ["demosite"]
    assert (s.concurrency, s.min_ttl, s.refresh_before) == (8, 30.0, 300.0)
    assert s.box is not None


def test_environment_and_flags() -> None:
    env = {
        "REDIS_URL": "redis://:pw@10.0.0.1:6379/2",
        "ACCOUNTPOOL_PORT": "7000",
        "ACCOUNTPOOL_API_KEY": API_KEY,
        "ACCOUNTPOOL_SITE_URLS": "demosite=http://10.0.0.9:8000",
        "ACCOUNTPOOL_CONCURRENCY": "3",
    }
    s = settings(["serve", "--host", "0.0.0.0", "--concurrency", "5"], env)
    assert (s.port, s.api_key, s.concurrency, s.host) == (7000, API_KEY, 5, "0.0.0.0")
    assert s.redis_url.endswith("10.0.0.1:6379/2")
    assert s.adapters["demosite"].check_url.startswith("http://10.0.0.9:8000/")  # type: ignore[attr-defined]


def test_secret_key_from_file(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    environ: dict[str, str] = {}
    args = build_parser(environ).parse_args(["generate", "--secret-key-file", str(key_file)])
    assert settings_from_args(args, environ).box is not None


def test_refuses_non_loopback_without_api_key() -> None:
    message = error(["serve", "--host", "0.0.0.0"])
    assert "refusing to listen on non-loopback address '0.0.0.0' without an API key" in message
    assert settings(["serve", "--host", "0.0.0.0", "--insecure-no-api-key"]).api_key is None
    env = {"ACCOUNTPOOL_INSECURE_NO_API_KEY": "true"}
    assert settings(["serve", "--host", "10.1.2.3"], env).api_key is None
    assert settings(["serve", "--host", "::1"]).api_key is None
    assert settings(["serve", "--host", "localhost"]).api_key is None


@pytest.mark.parametrize(
    ("argv", "env", "fragment"),
    [
        (["serve"], {"ACCOUNTPOOL_SECRET_KEY": ""}, "ACCOUNTPOOL_SECRET_KEY"),
        (["import", "demosite", "-"], {"ACCOUNTPOOL_SECRET_KEY": ""}, "keygen"),
        (["serve"], {"ACCOUNTPOOL_SECRET_KEY": "short"}, "not a Fernet key"),
        (["serve"], {"ACCOUNTPOOL_API_KEY": "short"}, "too short"),
        (["serve", "--api-key-file", "/nonexistent/k"], {}, "cannot read /nonexistent/k"),
        (["serve", "--api-key-file", "/dev/null"], {"ACCOUNTPOOL_API_KEY": API_KEY}, "only one"),
        (["serve", "--port", "0"], {}, "--port/ACCOUNTPOOL_PORT"),
        (["serve", "--port", "70000"], {}, "between 1 and 65535"),
        (["serve", "--port", "http"], {}, "must be an integer"),
        (["serve", "--port", "1e3"], {}, "--port/ACCOUNTPOOL_PORT must be an integer"),
        (["serve", "--concurrency", "1e9"], {}, "--concurrency/ACCOUNTPOOL_CONCURRENCY must be"),
        (["serve", "--concurrency", "1001"], {}, "between 1 and 1000"),
        (["serve", "--backoff-max", "1e400"], {}, "--backoff-max"),
        (["serve", "--redis-url", "redis://[bad"], {}, "--redis-url/REDIS_URL"),
        (["serve", "--redis-url", "localhost:6379"], {}, "--redis-url/REDIS_URL"),
        (["serve", "--redis-url", "http://:pw@h"], {}, "***"),
        (["serve", "--min-ttl", "60", "--refresh-before", "30"], {}, "--refresh-before"),
        (["serve", "--backoff-base", "10", "--backoff-max", "5"], {}, "--backoff-max"),
        (["test", "--timeout", "0"], {}, "--timeout/ACCOUNTPOOL_TIMEOUT must be > 0"),
        (["test", "--concurrency", "nan"], {}, "--concurrency"),
        (["serve", "--log-level", "loud"], {}, "--log-level"),
        (["serve", "--log-format", "xml"], {}, "--log-format"),
        (["serve", "--site-url", "other=http://h"], {}, "unknown site 'other'"),
        (["serve", "--sites", "/nonexistent.yaml"], {}, "cannot read sites file"),
        (
            ["serve", "--insecure-no-api-key"],
            {"ACCOUNTPOOL_INSECURE_NO_API_KEY": "maybe"},
            "must be true or false",
        ),
    ],
)
def test_bad_configuration(argv: list[str], env: dict[str, str], fragment: str) -> None:
    message = error(argv, env)
    assert fragment in message
    assert "pw@" not in message and KEY not in message


def test_test_command_needs_no_secret_key() -> None:
    environ: dict[str, str] = {}
    args = build_parser(environ).parse_args(["test", "--once"])
    assert settings_from_args(args, environ).box is None


@pytest.fixture
def root_logging() -> Iterator[None]:
    """main() configures the root logger as a service does; give the next tests theirs back."""
    root = logging.getLogger()
    handlers = root.handlers[:]
    levels = {name: logging.getLogger(name).level for name in ("", "httpx", "httpcore")}
    yield
    root.handlers[:] = handlers
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("root_logging")
def test_main_exit_codes_and_one_line_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ACCOUNTPOOL_SECRET_KEY", raising=False)
    monkeypatch.delenv("ACCOUNTPOOL_SECRET_KEY_FILE", raising=False)
    assert main(["serve"]) == 2  # bad configuration: systemd must not restart it
    err = capsys.readouterr().err
    assert err.startswith("crawlfleet accountpool: error: ") and err.count("\n") == 1
    assert main([]) == 2
    capsys.readouterr()
    assert main(["keygen"]) == 0
    assert len(capsys.readouterr().out.strip()) == 44
    monkeypatch.setenv("ACCOUNTPOOL_SECRET_KEY", KEY)
    assert main(["import", "demosite", "/nonexistent/accounts.txt"]) == 1
    assert "cannot read /nonexistent/accounts.txt" in capsys.readouterr().err
    assert main(["import", "nosite", "-"]) == 2
    assert "unknown site 'nosite' (known: demosite)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["serve", "--secret-key", "x"])  # no such flag: secrets never on the command line
    assert info.value.code == 2


def test_docs_list_every_setting() -> None:
    from crawlfleet.accountpool.config import OPTIONS
    from crawlfleet.service.options import default_text

    docs = (Path(__file__).resolve().parents[3] / "docs" / "accountpool.md").read_text()
    for option in OPTIONS:
        if option.secret:  # environment or file only: no flag to list
            assert f"| `{option.env}` |" in docs, option.env
            continue
        shown = default_text(option)
        default = f"`{shown}`" if shown else "(unset)"
        flag = f"`{option.flag}`" + (" (repeatable)" if option.kind == "list" else "")
        assert f"| {flag} | `{option.env}` | {default} |" in docs, option.flag

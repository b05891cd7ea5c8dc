"""One rule per concern for the hub services: numbers, API keys, the no-key opt-out, exit codes.

Issue 17 ("three hub services, three home-made runtimes") and issue 21 item 6: the proxy pool
and the dashboard accepted 1-character keys, the opt-out had two names, the account pool read
``--port 1e3`` as 1000 and exited 1 on bad configuration while the units restart on anything
but 2.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from crawlfleet.accountpool import cli as accountpool_cli
from crawlfleet.accountpool.config import settings_from_args
from crawlfleet.accountpool.crypto import generate_key
from crawlfleet.dashboard import config as dashboard_config
from crawlfleet.proxypool import config as proxypool_settings
from crawlfleet.service.options import ConfigError, parse_int, parse_number
from crawlfleet.service.secrets import MIN_API_KEY_LENGTH

ROOT = Path(__file__).resolve().parents[3]
FERNET = generate_key()


def proxypool(argv: list[str], env: dict[str, str]) -> object:
    parser = argparse.ArgumentParser()
    proxypool_settings.add_arguments(parser)
    return proxypool_settings.resolve(parser.parse_args(argv), env)


def accountpool(argv: list[str], env: dict[str, str]) -> object:
    environ = {"ACCOUNTPOOL_SECRET_KEY": FERNET, **env}
    parser = accountpool_cli.build_parser(environ)
    return settings_from_args(parser.parse_args(["serve", *argv]), environ)


def dashboard(argv: list[str], env: dict[str, str]) -> object:
    return dashboard_config.resolve(dashboard_config.build_parser(env).parse_args(argv), env)


SERVICES: dict[str, Callable[[list[str], dict[str, str]], object]] = {
    "PROXYPOOL": proxypool,
    "ACCOUNTPOOL": accountpool,
    "DASHBOARD": dashboard,
}


@pytest.mark.parametrize("raw", ["1e3", "1000.0", "0x10", "1_000", "", "ten", "nan", "9" * 30])
def test_integers_are_digits_only(raw: str) -> None:
    with pytest.raises(ValueError, match="must be an integer between 1 and 65535"):
        parse_int(raw, 1, 65535)


def test_integers_in_range() -> None:
    assert parse_int(" 1000 ", 1, 65535) == 1000
    with pytest.raises(ValueError):
        parse_int("65536", 1, 65535)


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "1e400", "0", "3601", "soon"])
def test_numbers_are_finite_and_bounded(raw: str) -> None:
    with pytest.raises(ValueError, match=re.escape("must be > 0 and <= 3600")):
        parse_number(raw, 0, 3600, above=True)


@pytest.mark.parametrize("prefix", sorted(SERVICES))
def test_one_key_length_rule(prefix: str, tmp_path: Path) -> None:
    build = SERVICES[prefix]
    short, enough = "k" * (MIN_API_KEY_LENGTH - 1), "k" * MIN_API_KEY_LENGTH
    with pytest.raises(ConfigError, match=f"from {prefix}_API_KEY is too short: use at least 16"):
        build([], {f"{prefix}_API_KEY": short})
    assert getattr(build([], {f"{prefix}_API_KEY": enough}), "api_key") == enough
    key_file = tmp_path / "key"
    key_file.write_text(short + "\n")
    with pytest.raises(ConfigError, match=r"--api-key-file .* is too short"):
        build(["--api-key-file", str(key_file)], {})
    key_file.write_text(enough + "\n")
    assert getattr(build(["--api-key-file", str(key_file)], {}), "api_key") == enough
    with pytest.raises(ConfigError, match=f"set only one of {prefix}_API_KEY and --api-key-file"):
        build(["--api-key-file", str(key_file)], {f"{prefix}_API_KEY": enough})


@pytest.mark.parametrize("prefix", sorted(SERVICES))
def test_one_rule_for_a_non_loopback_bind(prefix: str) -> None:
    build = SERVICES[prefix]
    message = (
        "refusing to listen on non-loopback address '10.1.2.3' without an API key: "
        f"set {prefix}_API_KEY or --api-key-file / {prefix}_API_KEY_FILE "
        "(or pass --insecure-no-api-key"
    )
    with pytest.raises(ConfigError, match=re.escape(message)):
        build(["--host", "10.1.2.3"], {})
    assert getattr(build(["--host", "10.1.2.3", "--insecure-no-api-key"], {}), "host")
    assert getattr(build(["--host", "10.1.2.3"], {f"{prefix}_INSECURE_NO_API_KEY": "1"}), "host")
    with pytest.raises(ConfigError, match="must be true or false"):
        build(["--host", "10.1.2.3"], {f"{prefix}_INSECURE_NO_API_KEY": "maybe"})


def test_the_dashboards_old_opt_out_names_still_work() -> None:
    assert dashboard(["--host", "10.1.2.3", "--allow-no-api-key"], {}).insecure_no_api_key
    env = {"DASHBOARD_ALLOW_NO_API_KEY": "yes"}
    assert dashboard(["--host", "10.1.2.3"], env).insecure_no_api_key


def test_the_proxy_pool_refuses_its_key_as_a_flag() -> None:
    with pytest.raises(ConfigError) as info:
        proxypool(["--api-key", "k" * 20], {})
    message = str(info.value)
    assert "PROXYPOOL_API_KEY" in message and "--api-key-file" in message
    assert "k" * 20 not in message


def test_the_service_unit_stays_failed_on_bad_configuration() -> None:
    # Exit status 2 is bad configuration for every service: systemd must not restart it.
    unit = ROOT / "roles" / "crawlfleet_service" / "templates" / "crawlfleet_service.service.j2"
    assert "RestartPreventExitStatus=2" in unit.read_text()


@pytest.mark.parametrize("role", ["proxypool", "accountpool", "dashboard", "lab_demosite"])
def test_no_service_gets_a_secret_on_its_command_line(role: str) -> None:
    tasks = (ROOT / "roles" / role / "tasks" / "main.yml").read_text()
    (exec_start,) = [
        line for line in tasks.splitlines() if "crawlfleet_service_exec_start:" in line
    ]
    assert "--api-key" not in exec_start and "KEY" not in exec_start

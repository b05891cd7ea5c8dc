"""The option tables of the hub services and their one parser (``crawlfleet.service.options``).

A flag wins over its variable, the variable over the default; a switch's variable is checked
even when the flag is given; a secret is read from its variable or its file and a flag for it
is refused; every bad value is a ``ConfigError`` of one line naming the flag and the variable,
and each service's command exits 2 with exactly that line (Hypothesis feeds hostile values).
"""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from crawlfleet.accountpool import cli as accountpool_cli
from crawlfleet.accountpool import config as accountpool_config
from crawlfleet.dashboard import cli as dashboard_cli
from crawlfleet.dashboard import config as dashboard_config
from crawlfleet.demosite import cli as demosite_cli
from crawlfleet.proxypool import cli as proxypool_cli
from crawlfleet.proxypool import config as proxypool_settings
from crawlfleet.service import options
from crawlfleet.service.options import ConfigError, Option

TABLES: dict[str, tuple[Option, ...]] = {
    "proxypool": proxypool_settings.OPTIONS,
    "accountpool": accountpool_config.OPTIONS,
    "dashboard": dashboard_config.OPTIONS,
    "demosite": demosite_cli.OPTIONS,
}
# How each service's command is run with extra flags (nothing starts: the values are bad).
MAINS: dict[str, Callable[[list[str]], int]] = {
    "proxypool": lambda argv: proxypool_cli.main(["serve", *argv]),
    "accountpool": lambda argv: accountpool_cli.main(["serve", *argv]),
    "dashboard": lambda argv: dashboard_cli.main(argv),
    "demosite": lambda argv: demosite_cli.main(argv),
}
TABLE = (
    Option("port", "--port", "T_PORT", 80, "port", options.integer(1, 65535)),
    Option("names", "--name", "T_NAMES", (), "names", options.items(options.text), kind="list"),
    Option("loud", "--loud", "T_LOUD", False, "loud", options.boolean, kind="switch"),
    Option("quiet", "--no-quiet", "T_QUIET", True, "quiet", options.boolean, kind="negswitch"),
    Option("key_file", "--key-file", "T_KEY_FILE", "", "key file", options.optional_text),
    Option("key", "--key", "T_KEY", None, "key", secret=True, file="key_file"),
    Option("token", None, "T_TOKEN", None, "token", secret=True),
)


def resolve(
    argv: list[str], env: dict[str, str], table: tuple[Option, ...] = TABLE
) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    options.add_arguments(parser, table)
    return options.resolve(table, parser.parse_args(argv), env)


def test_defaults_then_variables_then_flags() -> None:
    assert resolve([], {}) == {
        "port": 80,
        "names": (),
        "loud": False,
        "quiet": True,
        "key_file": "",
        "key": None,
        "token": None,
    }
    env = {"T_PORT": "81", "T_NAMES": "a, b c", "T_LOUD": "yes", "T_QUIET": "off"}
    values = resolve([], env)
    assert (values["port"], values["names"], values["loud"], values["quiet"]) == (
        81,
        ("a", "b", "c"),
        True,
        False,
    )
    values = resolve(["--port", "82", "--name", "x", "--name", "y", "--no-quiet"], env)
    assert (values["port"], values["names"], values["quiet"]) == (82, ("x", "y"), False)


def test_a_switch_variable_is_checked_even_with_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"^--loud/T_LOUD must be true or false"):
        resolve(["--loud"], {"T_LOUD": "maybe"})


def test_secrets_come_from_the_environment_or_a_file(tmp_path: Path) -> None:
    assert resolve([], {"T_KEY": " k ", "T_TOKEN": "t"})["key"] == ("k", "T_KEY")
    assert resolve([], {"T_TOKEN": "t"})["token"] == ("t", "T_TOKEN")
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    assert resolve(["--key-file", str(key_file)], {})["key"] == (
        "from-file",
        f"--key-file {key_file}",
    )
    with pytest.raises(ConfigError, match="set only one of T_KEY and --key-file / T_KEY_FILE"):
        resolve(["--key-file", str(key_file)], {"T_KEY": "k"})
    with pytest.raises(ConfigError) as info:
        resolve(["--key", "hunter2"], {})
    assert str(info.value).startswith("--key is refused: a flag shows the key to every user")
    assert "hunter2" not in str(info.value)


def test_shown_masks_secrets() -> None:
    values = resolve([], {"T_KEY": "hunter2"})
    shown = options.shown(TABLE, values)
    assert shown["key"] == "***" and shown["token"] is None
    assert "hunter2" not in repr(shown)


@pytest.mark.parametrize("service", sorted(TABLES))
def test_every_table_names_each_setting_once(service: str) -> None:
    table = TABLES[service]
    for kind in ("name", "env"):
        names = [getattr(opt, kind) for opt in table]
        assert len(names) == len(set(names)), names
    flags = [flag for opt in table for flag in (opt.flag, *opt.aliases) if flag]
    assert len(flags) == len(set(flags)), flags
    for opt in table:
        assert opt.help and opt.kind in options.KINDS
        if opt.file:
            assert opt.secret and any(o.name == opt.file for o in table)


def _checked(table: tuple[Option, ...]) -> list[Option]:
    """The options whose values can be wrong (not free text), secrets excepted."""
    free = (str, options.optional_text)
    return [opt for opt in table if not opt.secret and opt.parse not in free]


CHECKED = {service: _checked(table) for service, table in TABLES.items()}
HOSTILE = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "--", "1e3", "0x10", "nan", "-inf", "9" * 40, "-1", "\n", "a\x00b"]),
    st.text(alphabet="0123456789.-+e, ", max_size=12),
)
# The exit-status test runs a whole command per example: a third of the profile's budget.
MAIN_BUDGET = settings(max_examples=max(10, settings.default.max_examples // 3))


def _is_bad(opt: Option, raw: str) -> bool:
    try:
        opt.parse(raw)
    except ValueError:
        return True
    return False


def _one_line(message: str, opt: Option) -> None:
    assert "\n" not in message and "\r" not in message, message
    assert opt.names in message, (opt.names, message)


@pytest.mark.fuzz
@pytest.mark.parametrize("service", sorted(TABLES))
@given(data=st.data(), raw=HOSTILE)
def test_each_bad_value_is_one_line_naming_flag_and_variable(
    service: str, data: st.DataObject, raw: str
) -> None:
    opt = data.draw(st.sampled_from(CHECKED[service]), label="option")
    assume(_is_bad(opt, raw))
    table = TABLES[service]
    with pytest.raises(ConfigError) as from_env:
        options.resolve(table, argparse.Namespace(), {opt.env: raw})
    _one_line(str(from_env.value), opt)
    if opt.kind in ("switch", "negswitch"):
        return  # a switch's flag takes no value
    given = [raw] if opt.kind == "list" else raw
    with pytest.raises(ConfigError) as from_flag:
        options.resolve(table, argparse.Namespace(**{opt.name: given}), {})
    _one_line(str(from_flag.value), opt)


@pytest.mark.fuzz
@pytest.mark.parametrize("service", sorted(TABLES))
@MAIN_BUDGET
@given(data=st.data(), raw=HOSTILE.filter(lambda raw: "\x00" not in raw))
def test_each_bad_flag_exits_2_with_exactly_one_line(
    service: str, data: st.DataObject, raw: str
) -> None:
    with_values = [o for o in CHECKED[service] if o.flag and o.kind in ("value", "list")]
    opt = data.draw(st.sampled_from(with_values), label="option")
    assume(_is_bad(opt, "" if raw == "--" else raw))  # argparse reads `--x=--` as empty
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = MAINS[service]([f"{opt.flag}={raw}"])
    lines = err.getvalue().splitlines()
    assert status == 2, err.getvalue()
    assert len(lines) == 1 and lines[0].startswith(f"crawlfleet {service}"), lines
    assert opt.names in lines[0], lines[0]

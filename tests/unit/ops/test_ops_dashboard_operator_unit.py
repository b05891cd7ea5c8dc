"""The dashboard's operator password: a secret (environment or file, never a flag), long enough,
not the read-only API key; unset, the dashboard is read-only."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlfleet.dashboard.config import ConfigError, build_parser, resolve

KEY = "dashboard-key-0123456789"


def settings(argv: list[str], env: dict[str, str]) -> object:
    return resolve(build_parser(env).parse_args(argv), env)


def test_the_operator_password_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    assert settings([], {}).operator_password == ""  # type: ignore[attr-defined]
    env = {"DASHBOARD_OPERATOR_PASSWORD": "operator-0123456789"}
    assert settings([], env).operator_password == "operator-0123456789"  # type: ignore[attr-defined]
    secret = tmp_path / "operator"
    secret.write_text("from-a-file-0123456789\n")
    found = settings(["--operator-password-file", str(secret)], {})
    assert found.operator_password == "from-a-file-0123456789"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--operator-password", "operator-0123456789"], {},
         "--operator-password is refused: a flag shows the key to every user in ps"),
        ([], {"DASHBOARD_OPERATOR_PASSWORD": "short"},
         "the operator password from DASHBOARD_OPERATOR_PASSWORD is too short"),
        ([], {"DASHBOARD_OPERATOR_PASSWORD": KEY, "DASHBOARD_API_KEY": KEY},
         "is the API key: the key is read-only, so the operator password must differ"),
        (["--operator-password-file", "/nonexistent/operator"], {},
         "--operator-password-file / DASHBOARD_OPERATOR_PASSWORD_FILE: cannot read"),
    ],
)  # fmt: skip
def test_a_bad_operator_password_is_one_line(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(argv, env)
    text = str(caught.value)
    assert message in text and "\n" not in text
    assert "operator-0123456789" not in text and KEY not in text

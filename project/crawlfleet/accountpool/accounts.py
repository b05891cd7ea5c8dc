"""Account input: validation shared by the HTTP API (JSON) and the import command (lines).

Problems are reported by position (entry index or line number) and never quote the input,
which would put a password into a log or a terminal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_ACCOUNTS_PER_REQUEST = 10_000
MAX_USERNAME = 256
MAX_PASSWORD = 1024


def account_problem(username: object, password: object) -> str | None:
    """Why (username, password) cannot be stored, or None if it can."""
    if not isinstance(username, str) or not username.strip():
        return "username must be a non-empty string"
    if len(username) > MAX_USERNAME or not username.isprintable() or username != username.strip():
        return (
            f"username must be printable, at most {MAX_USERNAME} characters, "
            "without surrounding spaces"
        )
    if not isinstance(password, str) or not password:
        return "password must be a non-empty string"
    if len(password) > MAX_PASSWORD or "\n" in password or "\r" in password:
        return f"password must be one line of at most {MAX_PASSWORD} characters"
    return None


def parse_accounts_json(data: object) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    """``{"accounts": [{username, password}, …]}`` (or the bare list) into pairs and errors."""
    entries = data.get("accounts") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ValueError(
            'body must be {"accounts": [{"username": ..., "password": ...}, ...]} or that list'
        )
    if len(entries) > MAX_ACCOUNTS_PER_REQUEST:
        raise ValueError(f"at most {MAX_ACCOUNTS_PER_REQUEST} accounts per request")
    good: list[tuple[str, str]] = []
    errors: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            errors.append({"index": index, "error": "expected an object with username, password"})
            continue
        username, password = entry.get("username"), entry.get("password")
        problem = account_problem(username, password)
        if problem is not None:
            errors.append({"index": index, "error": problem})
        else:
            assert isinstance(username, str) and isinstance(password, str)
            good.append((username, password))
    return good, errors


def parse_account_lines(lines: Iterable[bytes]) -> tuple[list[tuple[str, str]], list[str]]:
    """``user:password`` lines into pairs and ``"line N: why"`` problems.

    Blank lines and lines starting with ``#`` are skipped silently; the password is everything
    after the first ``:`` (so it may contain ``:``), with the line ending removed.
    """
    good: list[tuple[str, str]] = []
    problems: list[str] = []
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            problems.append(f"line {number}: not UTF-8 text")
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        username, sep, password = line.partition(":")
        if not sep:
            problems.append(f"line {number}: no ':' between username and password")
            continue
        problem = account_problem(username, password)
        if problem is not None:
            problems.append(f"line {number}: {problem}")
            continue
        good.append((username, password))
    return good, problems

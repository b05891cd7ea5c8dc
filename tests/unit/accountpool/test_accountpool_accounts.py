"""Account input parsing: user:password lines and JSON entries, problems by position only."""

from __future__ import annotations

import pytest

from crawlfleet.accountpool.accounts import (
    MAX_ACCOUNTS_PER_REQUEST,
    parse_account_lines,
    parse_accounts_json,
)


def test_lines_good_bad_comments_and_colons_in_passwords() -> None:
    lines = [
        b"alice:pw-alice\n",
        b"# a comment\n",
        b"\n",
        b"no-colon-pw-secret\n",
        b":pw-nouser\n",
        b"bob:\n",
        b"carol:pa:ss:word\r\n",
        b"\xff\xfe:pw\n",
        b" dave :pw-dave\n",
        b"erin:pw-erin",
    ]
    good, problems = parse_account_lines(lines)
    assert good == [("alice", "pw-alice"), ("carol", "pa:ss:word"), ("erin", "pw-erin")]
    assert [p.split(":")[0] for p in problems] == [
        "line 4",
        "line 5",
        "line 6",
        "line 8",
        "line 9",
    ]
    assert "':'" in problems[0]
    joined = "\n".join(problems)
    for secret in ("no-colon-pw-secret", "pw-nouser", "pw-dave"):
        assert secret not in joined


def test_json_body_shapes_and_entry_errors() -> None:
    good, errors = parse_accounts_json(
        {
            "accounts": [
                {"username": "a", "password": "pw-a"},
                {"username": "", "password": "pw-x"},
                {"username": "b"},
                "a:b",
                {"username": "c", "password": 5},
                {"username": "d\n", "password": "pw-d"},
            ]
        }
    )
    assert good == [("a", "pw-a")]
    assert [e["index"] for e in errors] == [1, 2, 3, 4, 5]
    assert "pw-x" not in str(errors) and "pw-d" not in str(errors)
    assert parse_accounts_json([{"username": "a", "password": "p"}]) == ([("a", "p")], [])


@pytest.mark.parametrize("body", [None, 3, "x", {"accounts": "x"}, {"other": []}])
def test_json_body_of_wrong_shape_is_refused(body: object) -> None:
    with pytest.raises(ValueError, match="accounts"):
        parse_accounts_json(body)


def test_json_body_too_many_accounts() -> None:
    entries = [{"username": f"u{i}", "password": "p"} for i in range(MAX_ACCOUNTS_PER_REQUEST + 1)]
    with pytest.raises(ValueError, match="at most"):
        parse_accounts_json(entries)

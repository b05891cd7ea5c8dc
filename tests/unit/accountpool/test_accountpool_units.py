"""Small pure pieces: refresh timing, what is due for a login, structured log lines."""

from __future__ import annotations

import json
import logging
import sys

from crawlfleet.accountpool.generator import Generator, refresh_time
from crawlfleet.accountpool.store import AccountView, CredentialRecord
from crawlfleet.service.logs import JsonFormatter, KeyValueFormatter


def test_refresh_time_before_expiry_but_not_before_half_life() -> None:
    assert refresh_time(0, 3600, 300) == 3300
    assert refresh_time(0, 10, 300) == 5  # short token: half its lifetime, not immediately
    assert refresh_time(100, 100, 300) == 100


def test_is_due() -> None:
    record = CredentialRecord("t", expires_at=200, refresh_at=150, obtained_at=100)
    assert Generator.is_due(AccountView("u", b"", None, None), now=0)
    assert not Generator.is_due(AccountView("u", b"", record, None), now=120)
    assert Generator.is_due(AccountView("u", b"", record, None), now=150)
    assert not Generator.is_due(AccountView("u", b"", None, next_try=10), now=5)
    assert Generator.is_due(AccountView("u", b"", None, next_try=10), now=10)


def test_log_lines_carry_extras_and_errors() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "login %s", ("rejected",), None)
    record.site, record.user = "demosite", "alice"
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "login rejected"
    assert (line["site"], line["user"], line["level"]) == ("demosite", "alice", "warning")
    assert "site=demosite user=alice" in KeyValueFormatter().format(record)  # one kv format
    try:
        raise ValueError("bad")
    except ValueError:
        failed = logging.LogRecord("x", logging.ERROR, __file__, 1, "m", (), sys.exc_info())
    assert json.loads(JsonFormatter().format(failed))["error"] == "ValueError: bad"

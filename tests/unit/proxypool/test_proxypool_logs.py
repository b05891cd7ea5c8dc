"""Structured log lines: key=value pairs or JSON objects, one line per event."""

from __future__ import annotations

import json
import logging

import pytest

from crawlfleet.service import logs


def emit(fmt: str, capsys: pytest.CaptureFixture[str], **fields: object) -> str:
    logs.setup(fmt, "debug")
    try:
        raise ValueError("boom\nsecond line")
    except ValueError as exc:
        logs.event(logging.getLogger("crawlfleet.proxypool"), "test_cycle", exc_info=exc, **fields)
    logging.getLogger("uvicorn.error").info("Started server process [%d]", 42)
    return capsys.readouterr().err


def test_key_value_lines(capsys: pytest.CaptureFixture[str]) -> None:
    out = emit("kv", capsys, tested=3, error="Redis unreachable: x", empty="", level="spoof")
    first, second = out.splitlines()
    assert first.startswith("ts=")
    assert " level=info logger=crawlfleet.proxypool event=test_cycle tested=3 " in first
    assert 'error="Redis unreachable: x" empty=""' in first
    assert "spoof" not in first  # a field cannot overwrite the line's own keys
    assert 'traceback="Traceback' in first and "second line" in first
    assert second.endswith('event=log msg="Started server process [42]"')


def test_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    out = emit("json", capsys, tested=3, ratio=0.5)
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["event"] == "test_cycle" and first["tested"] == 3 and first["ratio"] == 0.5
    assert first["traceback"].endswith("ValueError: boom\nsecond line")
    assert second["msg"] == "Started server process [42]"

"""Waiting on a condition with a bounded timeout: tests never wait on the wall clock alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(
    check: Callable[[], bool], what: str = "", timeout: float = 30.0, interval: float = 0.05
) -> None:
    """Poll ``check`` until it is true; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what or 'a condition'}")


def wait_or_stop(
    check: Callable[[], bool], what: str, timeout: float, stop: Callable[[], object],
    interval: float = 0.05,
) -> None:  # fmt: skip
    """:func:`wait_until` for something starting: when the wait fails (the timeout, or an error
    ``check`` raises), ``stop()`` it before the error goes on; no half-started process is left."""
    try:
        wait_until(check, what, timeout, interval)
    except BaseException:
        stop()
        raise


async def until(
    check: Callable[[], bool], what: str = "", timeout: float = 10.0, interval: float = 0.02
) -> None:
    """:func:`wait_until` inside a coroutine: polls between awaits, so the loop keeps running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what or 'a condition'}")

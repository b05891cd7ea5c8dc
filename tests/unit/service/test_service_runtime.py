"""``crawlfleet.service.runtime`` on its own: binding, the periodic loop and the exit statuses."""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket

import pytest

from crawlfleet.service import runtime
from crawlfleet.service.options import ConfigError, ServiceFailure


def test_bind_listens_and_names_its_failures() -> None:
    sock = runtime.bind("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the socket listens before any server runs
        with pytest.raises(ServiceFailure, match=f"^cannot listen on 127.0.0.1:{port}: "):
            runtime.bind("127.0.0.1", port)
    finally:
        sock.close()
    with pytest.raises(ConfigError, match=r"^--host/X_HOST 'no-such-host\.invalid': "):
        runtime.bind("no-such-host.invalid", 0, "--host/X_HOST")


def test_every_runs_until_stopped_and_wakes_early() -> None:
    async def scenario() -> tuple[int, bool]:
        stop, wake = asyncio.Event(), asyncio.Event()
        runs = 0
        woken, endless = asyncio.Event(), asyncio.Event()

        async def cycle() -> None:
            nonlocal runs
            runs += 1
            if runs == 1:
                wake.set()  # set while the cycle runs: the next cycle starts at once
            elif runs == 2:
                woken.set()
            else:
                endless.set()
                await asyncio.Event().wait()  # a cycle that never ends by itself

        loop = asyncio.create_task(runtime.every(3600, cycle, stop, wake=wake))
        await asyncio.wait_for(woken.wait(), 10)  # long before the hour-long interval
        wake.set()
        await asyncio.wait_for(endless.wait(), 10)
        stop.set()
        await asyncio.wait_for(loop, 10)  # the endless third cycle is cancelled
        return runs, loop.done()

    assert asyncio.run(scenario()) == (3, True)


def test_until_stopped_says_which_came_first() -> None:
    async def scenario() -> tuple[tuple[bool, object], tuple[bool, object]]:
        async def answer() -> int:
            return 42

        stop = asyncio.Event()
        first = await runtime.until_stopped(answer(), stop)
        stop.set()
        second = await runtime.until_stopped(asyncio.Event().wait(), stop)
        return first, second

    assert asyncio.run(scenario()) == ((True, 42), (False, None))


@pytest.mark.parametrize(
    ("error", "status"),
    [(ConfigError("--x/X must be 1"), 2), (ServiceFailure("cannot listen on h:1: busy"), 1)],
)
def test_run_turns_errors_into_one_line_and_a_status(error: Exception, status: int) -> None:
    def work() -> int:
        raise error

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert runtime.run("crawlfleet x", work) == status
    assert err.getvalue() == f"crawlfleet x: error: {error}\n"
    assert runtime.run("crawlfleet x", lambda: 0) == 0

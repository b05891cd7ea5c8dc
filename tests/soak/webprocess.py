"""Starting the soak's synthetic web (``web.py``) as its own process, for the soak and its tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.services import log_tail, start_process
from support.waiting import wait_or_stop

WEB = Path(__file__).resolve().parent / "web.py"


def start_web(
    out: Path,
    port: int,
    admin_port: int,
    hosts: int,
    pages: int,
    seed: int,
    access_log: Path,
    timeout: float = 60.0,
    domain: str = "",
) -> subprocess.Popen[bytes]:
    """``web.py`` on ``port`` (its admin on ``admin_port``), its output in ``out``, once it says
    ``ready``; a web that exits first fails with its output, one that never says it within
    ``timeout`` seconds is killed. With ``domain``, its hosts are names on 127.0.0.1."""
    argv = [sys.executable, str(WEB), "--port", str(port), "--hosts", str(hosts), "--pages",
            str(pages), "--seed", str(seed), "--access-log", str(access_log), "--admin-port",
            str(admin_port)]  # fmt: skip
    if domain:
        argv += ["--domain", domain, "--listen", "127.0.0.1"]
    proc = start_process(argv, out)

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"web.py exited {proc.returncode}: {log_tail(out)}")
        return b"ready" in out.read_bytes()

    wait_or_stop(ready, "the soak's web listening", timeout, proc.kill)
    return proc

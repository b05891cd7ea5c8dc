"""The four HTTP services of the hub as subprocesses on loopback, for the shared-runtime tests.

``start_service(kind, tmp, redis_url)`` runs the proxy pool, account pool, dashboard or demo
site the way an operator does (``python -m crawlfleet.cli …``), logs to a file, and returns
once ``/health`` answers. ``HubService`` knows the process's memory (``rss``/``peak`` from
``/proc``), its log, and how to stop it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from support.net import free_port
from support.services import start_process, stop_process, wait_healthy

from crawlfleet.accountpool.crypto import generate_key

API_KEY = "hub-service-test-key-0123456789abcdef"
ADMIN_SECRET = "hub-service-admin-secret"
KINDS = ("proxypool", "accountpool", "dashboard", "demosite")
# The service's own environment variables are dropped, so the machine's settings cannot leak in.
_PREFIXES = ("PROXYPOOL_", "ACCOUNTPOOL_", "DASHBOARD_", "DEMOSITE_")


@dataclass
class HubService:
    kind: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    api_key: str | None
    log_offset: int = field(default=0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.api_key} if self.api_key else {}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def new_log(self) -> str:
        """The log written since the last call."""
        text = self.log()
        fresh, self.log_offset = text[self.log_offset :], len(text)
        return fresh

    def _status_kb(self, field_name: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {field_name} in /proc/{self.process.pid}/status")

    def rss(self) -> int:
        """Resident memory now, in bytes."""
        return self._status_kb("VmRSS") * 1024

    def peak(self) -> int:
        """Highest resident memory since the process started, in bytes."""
        return self._status_kb("VmHWM") * 1024

    def stop(self, timeout: float = 15) -> int:
        return stop_process(self.process, timeout)


def service_argv(kind: str, port: int, redis_url: str) -> list[str]:
    base = [sys.executable, "-m", "crawlfleet.cli", kind]
    if kind == "proxypool":
        return [*base, "serve", "--port", str(port), "--redis-url", redis_url,
                "--no-fetch", "--no-test"]  # fmt: skip
    if kind == "accountpool":
        site = "demosite=http://127.0.0.1:9"  # never called: the loops are off
        return [*base, "serve", "--port", str(port), "--redis-url", redis_url,
                "--site-url", site, "--no-generator", "--no-tester"]  # fmt: skip
    if kind == "dashboard":
        return [*base, "--port", str(port), "--redis-url", redis_url, "--sample-interval", "0.5"]
    return [*base, "--port", str(port), "--books", "20", "--admin-secret", ADMIN_SECRET,
            "--accounts", "alice:pw1", "--log-level", "warning"]  # fmt: skip


def start_service(
    kind: str, tmp: Path, redis_url: str, *, api_key: str | None = API_KEY
) -> HubService:
    """Start one service (``api_key`` None: without a key; ignored by the demo site)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PREFIXES) and k != "REDIS_URL"}
    if kind == "accountpool":
        env["ACCOUNTPOOL_SECRET_KEY"] = generate_key()
    if api_key is not None and kind != "demosite":
        env[f"{kind.upper()}_API_KEY"] = api_key
    log_path = tmp / f"{kind}-{port}.log"
    process = start_process(service_argv(kind, port, redis_url), log_path, env=env)
    service = HubService(kind, process, port, log_path, api_key if kind != "demosite" else None)
    wait_healthy(process, f"{service.url}/health", log_path, timeout=30)
    return service

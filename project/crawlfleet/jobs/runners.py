"""How an agent starts and stops the crawler processes of a job on its host.

- :class:`SystemdRunner` (the fleet): the crawler role's units ``crawler@<spider>-<n>``, started
  and stopped with ``systemctl``. The spiders installed are the role's spider environment files
  (``/etc/crawlfleet/spiders/<spider>.env``: ``CRAWLFLEET_PROJECT``, and
  ``CRAWLFLEET_PROCESSES`` when it sets how many units a host runs). A job's arguments reach the
  units through ``<run dir>/<spider>.job.env`` (``CRAWLFLEET_JOB``, ``CRAWLFLEET_CRAWL_ARGS``),
  which the crawler launcher reads; it is removed when the job's units stop or end.
- :class:`ProcessRunner` (development, the loopback tests): ``scrapy crawl`` processes spawned
  directly in each project's directory (``NAME=DIR``), its spiders found with ``scrapy list``,
  with the agent's environment and its ``REDIS_URL`` (the crawler's credentials).
- :class:`NoRunner` (the hub's scheduler agent, ``--runner none --schedules``): starts nothing and
  registers no spider, so no job is ever sent to it; it fires the schedules and runs the watchdog.

Either way a unit is ``{"name", "pid"}`` and stopping is SIGTERM (Scrapy closes gracefully and
gives its leases back), SIGKILL after the stop timeout. ``tail`` reads the last lines of a unit's
log, read only when asked (the dashboard's log view): the process runner's log file of the job's
unit, or ``journalctl -u crawler@<spider>-<n> -n N`` within the job's start and end.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

START_GRACE = 1.0  # seconds a new process must live to count as started
LIST_TIMEOUT = 120.0
LINE_CHARS = 1000  # a log line longer than this is cut
TAIL_BYTES = 256 * 1024  # at most this much of the end of a log file is read


class RunnerError(RuntimeError):
    """A unit that could not be started or found (one line)."""


@dataclass(frozen=True)
class Launch:
    """What to run: a project's spider with its arguments, for one job."""

    job: str
    project: str
    spider: str
    args: Sequence[tuple[str, str]] = ()
    settings: Sequence[tuple[str, str]] = ()

    def crawl_args(self) -> list[str]:
        out: list[str] = []
        for name, value in self.args:
            out += ["-a", f"{name}={value}"]
        for name, value in self.settings:
            out += ["-s", f"{name}={value}"]
        return out


class Runner(Protocol):
    name: str

    def installed(self) -> dict[str, str]: ...

    def start(self, launch: Launch) -> list[dict[str, Any]]: ...

    def running(self, unit: Mapping[str, Any]) -> tuple[bool, int | None]: ...

    def stop(self, units: Sequence[Mapping[str, Any]]) -> None: ...

    def ended(self, units: Sequence[Mapping[str, Any]]) -> None: ...

    def tail(self, job: str, unit: str, lines: int, window: tuple[int, int]) -> list[str]: ...


# ``scheme://user:password@`` in a log line (a crawl may log its settings' URLs).
_CREDENTIALS = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)([^:/@\s]*):[^@\s/]+@")


def _cut(lines: Sequence[str], count: int) -> list[str]:
    """The last ``count`` lines, each cut to ``LINE_CHARS``, passwords in URLs masked."""
    last = lines[-count:] if count > 0 else []
    return [_CREDENTIALS.sub(r"\1\2:***@", line)[:LINE_CHARS] for line in last]


def tail_file(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of the file at ``path`` (its last ``TAIL_BYTES`` read)."""
    with path.open("rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - TAIL_BYTES))
        data = handle.read()
    text = data.decode("utf-8", errors="replace").splitlines()
    if size > TAIL_BYTES and text:
        text = text[1:]  # the first line read may be a part of one
    return _cut(text, lines)


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


@dataclass
class ProcessRunner:
    """``scrapy crawl`` processes of the projects in ``projects`` (name → directory)."""

    projects: Mapping[str, Path]
    environment: Mapping[str, str] = field(default_factory=dict)  # REDIS_URL for the crawls
    processes: int = 1
    log_dir: Path = Path(".")
    stop_timeout: float = 30.0
    name: str = "process"
    children: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    _spiders: dict[str, str] | None = None

    def _env(self, directory: Path) -> dict[str, str]:
        path = os.environ.get("PYTHONPATH", "")
        paths = os.pathsep.join(p for p in (str(directory), path) if p)
        return {**os.environ, **self.environment, "PYTHONPATH": paths}

    def installed(self) -> dict[str, str]:
        """spider → project, from ``scrapy list`` in each project's directory (read once)."""
        if self._spiders is None:
            found: dict[str, str] = {}
            for project, directory in sorted(self.projects.items()):
                proc = subprocess.run(
                    [sys.executable, "-m", "scrapy", "list"],
                    cwd=directory,
                    env=self._env(directory),
                    capture_output=True,
                    text=True,
                    timeout=LIST_TIMEOUT,
                    check=False,
                )
                if proc.returncode != 0:
                    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                    raise RunnerError(
                        f"project {project} ({directory}): scrapy list failed: {last}"
                    )
                for spider in proc.stdout.split():
                    found.setdefault(spider, project)
            self._spiders = found
        return dict(self._spiders)

    def start(self, launch: Launch) -> list[dict[str, Any]]:
        directory = self.projects.get(launch.project)
        if directory is None:
            raise RunnerError(f"project {launch.project!r} is not installed here")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        units: list[dict[str, Any]] = []
        argv = [sys.executable, "-m", "scrapy", "crawl", launch.spider, *launch.crawl_args()]
        for n in range(1, self.processes + 1):
            name = f"{launch.spider}-{n}"
            log = self.log_dir / f"job-{launch.job}-{name}.log"
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    argv,
                    cwd=directory,
                    env={**self._env(directory), "CRAWLFLEET_JOB": launch.job},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.children[proc.pid] = proc
            units.append({"name": name, "pid": proc.pid, "log": str(log)})
        deadline = time.monotonic() + START_GRACE
        while time.monotonic() < deadline:
            for unit in units:
                code = self.children[unit["pid"]].poll()
                if code is not None and code != 0:
                    self.stop(units)
                    tail = Path(unit["log"]).read_text(errors="replace").strip().splitlines()
                    raise RunnerError(
                        f"scrapy crawl {launch.spider} exited with {code} at start: "
                        f"{tail[-1] if tail else 'no output'}"
                    )
            time.sleep(0.05)
        return units

    def running(self, unit: Mapping[str, Any]) -> tuple[bool, int | None]:
        pid = int(unit["pid"])
        child = self.children.get(pid)
        if child is None:  # started by an earlier run of the agent: no exit status to read
            return _pid_alive(pid), None
        code = child.poll()
        if code is not None:
            self.children.pop(pid, None)
        return code is None, code

    def stop(self, units: Sequence[Mapping[str, Any]]) -> None:
        pids = [int(u["pid"]) for u in units]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for pid in pids:
            child = self.children.get(pid)
            while time.monotonic() < deadline:
                if (child.poll() is not None) if child else not _pid_alive(pid):
                    break
                time.sleep(0.05)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                if child is not None:
                    child.wait(timeout=10)

    def ended(self, units: Sequence[Mapping[str, Any]]) -> None:
        """Nothing to clean up: the processes are gone (their pids are not signalled again)."""

    def tail(self, job: str, unit: str, lines: int, window: tuple[int, int]) -> list[str]:
        """The end of the unit's log file (``<log dir>/job-<job>-<unit>.log``)."""
        path = self.log_dir / f"job-{job}-{unit}.log"
        if not path.is_file():
            raise RunnerError(f"{path} does not exist")
        return tail_file(path, lines)


def read_env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines of a systemd environment file (quotes removed, comments skipped)."""
    values: dict[str, str] = {}
    for raw_line in path.read_text().splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, raw = line.partition("=")
        try:
            parts = shlex.split(raw)
        except ValueError:
            parts = [raw]
        values[name.strip()] = parts[0] if parts else ""
    return values


@dataclass
class NoRunner:
    """Starts no crawls: the runner of an agent that only schedules (the hub's)."""

    name: str = "none"

    def installed(self) -> dict[str, str]:
        return {}

    def start(self, launch: Launch) -> list[dict[str, Any]]:
        raise RunnerError(f"this agent starts no crawls (--runner none): not {launch.spider!r}")

    def running(self, unit: Mapping[str, Any]) -> tuple[bool, int | None]:
        return False, None

    def stop(self, units: Sequence[Mapping[str, Any]]) -> None:
        return None

    def ended(self, units: Sequence[Mapping[str, Any]]) -> None:
        return None

    def tail(self, job: str, unit: str, lines: int, window: tuple[int, int]) -> list[str]:
        raise RunnerError(f"this agent runs no units (--runner none): not {unit!r}")


@dataclass
class SystemdRunner:
    """The crawler role's ``crawler@<spider>-<n>`` units, through ``systemctl``."""

    spiders_dir: Path = Path("/etc/crawlfleet/spiders")
    run_dir: Path = Path("/run/crawlfleet/jobs")
    processes: int = 1
    systemctl: str = "systemctl"
    journalctl: str = "journalctl"
    stop_timeout: float = 120.0
    name: str = "systemd"

    def _systemctl(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.systemctl, *args], capture_output=True, text=True, timeout=timeout, check=False
        )

    def _processes(self, spider: str) -> int:
        env = read_env_file(self.spiders_dir / f"{spider}.env")
        raw = env.get("CRAWLFLEET_PROCESSES", "")
        return int(raw) if raw.isdigit() and int(raw) > 0 else self.processes

    def installed(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for path in sorted(self.spiders_dir.glob("*.env")):
            project = read_env_file(path).get("CRAWLFLEET_PROJECT", "")
            if project:
                found[path.stem] = project
        return found

    def start(self, launch: Launch) -> list[dict[str, Any]]:
        if launch.spider not in self.installed():
            raise RunnerError(
                f"spider {launch.spider!r} is not installed here ({self.spiders_dir})"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        job_env = self.run_dir / f"{launch.spider}.job.env"
        args = shlex.join(launch.crawl_args())
        job_env.write_text(
            f"CRAWLFLEET_JOB={launch.job}\nCRAWLFLEET_CRAWL_ARGS={shlex.quote(args)}\n"
        )
        names = [
            f"crawler@{launch.spider}-{n}" for n in range(1, self._processes(launch.spider) + 1)
        ]
        done = self._systemctl("start", *names)
        if done.returncode != 0:
            self._systemctl("stop", *names)
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise RunnerError(f"systemctl start {' '.join(names)} failed: {last}")
        units = []
        for name in names:
            shown = self._systemctl("show", "--property=MainPID", "--value", name)
            pid = int(shown.stdout.strip() or 0) if shown.stdout.strip().isdigit() else 0
            units.append({"name": name, "pid": pid})
        return units

    def running(self, unit: Mapping[str, Any]) -> tuple[bool, int | None]:
        state = self._systemctl("is-active", str(unit["name"])).stdout.strip()
        if state in ("active", "activating", "deactivating", "reloading"):
            return True, None
        shown = self._systemctl(
            "show", "--property=ExecMainStatus", "--value", str(unit["name"])
        ).stdout.strip()
        return False, int(shown) if shown.isdigit() else None

    def stop(self, units: Sequence[Mapping[str, Any]]) -> None:
        names = [str(u["name"]) for u in units]
        if names:
            self._systemctl("stop", *names, timeout=self.stop_timeout + 30)
        self.ended(units)

    def ended(self, units: Sequence[Mapping[str, Any]]) -> None:
        """The job's arguments go with it: units started later without a job run plain."""
        for spider in {str(u["name"]).partition("@")[2].rpartition("-")[0] for u in units}:
            (self.run_dir / f"{spider}.job.env").unlink(missing_ok=True)

    def tail(self, job: str, unit: str, lines: int, window: tuple[int, int]) -> list[str]:
        """``journalctl -u UNIT -n LINES`` between the job's start and end (Redis ms; an end of
        0: still running), so a unit reused by a later job shows this job's lines. Read newest
        first (``--reverse``) and turned back: with ``--since``, journalctl's ``-n`` keeps the
        first lines after it (systemd 252), not the last."""
        if not unit.startswith("crawler@"):
            raise RunnerError(f"{unit!r} is not a crawler unit")
        since, until = window
        argv = [self.journalctl, "-u", unit, "-n", str(lines), "--reverse", "--no-pager"]
        argv += ["-o", "short-iso"]
        if since:
            argv += ["--since", f"@{since // 1000}"]
        if until:
            argv += ["--until", f"@{until // 1000 + 1}"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise RunnerError(f"journalctl -u {unit} failed: {last}")
        return _cut(done.stdout.splitlines()[::-1], lines)

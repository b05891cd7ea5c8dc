"""A real CPU cap for a benchmark's server processes: one cgroup v1 ``cpu`` group per process,
limited by CFS bandwidth (``cpu.cfs_quota_us`` of every ``cpu.cfs_period_us``) to a fraction of
one core, so that on a small shared machine the server, not its clients, is what saturates.

``cpu_cap(name, share)`` creates ``/sys/fs/cgroup/cpu/<name>`` (needs root and the v1 ``cpu``
controller mounted there; the one-line error says so otherwise), ``CpuCap.add(pid)`` moves a
process with all its threads into it (children it forks later inherit it), ``CpuCap.stat()``
reads the kernel's ``cpu.stat`` (``nr_periods``, ``nr_throttled``, ``throttled_time``: the proof
that the cap bites) and ``CpuCap.remove()`` deletes the group once its processes are gone.
``cfs_quota`` and ``group_name`` validate the inputs (one-line ``ValueError`` naming the argument).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from support.waiting import wait_until

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000
# the kernel refuses a quota below 1 ms and a period outside 1 ms .. 1 s
MIN_QUOTA_US = 1_000
MIN_PERIOD_US, MAX_PERIOD_US = 1_000, 1_000_000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def cfs_quota(share: float, period_us: int = PERIOD_US) -> int:
    """The ``cpu.cfs_quota_us`` that gives ``share`` of one core per ``period_us``."""
    if isinstance(period_us, bool) or not isinstance(period_us, int):
        raise ValueError(f"period_us must be a whole number of µs, got {period_us!r}")
    if not MIN_PERIOD_US <= period_us <= MAX_PERIOD_US:
        raise ValueError(
            f"period_us must be between {MIN_PERIOD_US} and {MAX_PERIOD_US} µs, got {period_us}"
        )
    if isinstance(share, bool) or not isinstance(share, int | float) or not math.isfinite(share):
        raise ValueError(f"share must be a finite number of cores, got {share!r}")
    cores = os.cpu_count() or 1
    if not 0 < share <= cores:
        raise ValueError(f"share must be > 0 and at most the machine's {cores} cores, got {share}")
    quota = round(share * period_us)
    if quota < MIN_QUOTA_US:
        raise ValueError(
            f"share {share} of a {period_us} µs period is a quota under the kernel's "
            f"{MIN_QUOTA_US} µs: take a larger share or period"
        )
    return quota


def group_name(name: str) -> str:
    """``name`` if it is one safe cgroup directory name (no ``/``, no ``..``, not hidden)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"name must be 1-64 letters, digits, '_', '.' or '-' (not starting with one of "
            f"the last three), got {name!r}"
        )
    return name


@dataclass
class CpuCap:
    """One cgroup v1 ``cpu`` group capping its processes at ``share`` of one core."""

    path: Path
    share: float
    quota_us: int
    period_us: int

    def add(self, pid: int) -> None:
        """Move process ``pid`` (every thread of it) into the group."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def pids(self) -> list[int]:
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]

    def stat(self) -> dict[str, int]:
        """The kernel's ``cpu.stat`` of the group (periods, throttled periods and time)."""
        pairs = (line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        return {name: int(value) for name, value in pairs}

    def remove(self, timeout: float = 10) -> None:
        """Delete the group once the processes in it have exited (bounded wait)."""
        if not self.path.exists():
            return
        wait_until(lambda: not self.pids(), f"the processes of {self.path} to exit", timeout)
        self.path.rmdir()

    def describe(self) -> str:
        return f"cgroup v1 cpu.cfs_quota_us={self.quota_us} per cpu.cfs_period_us={self.period_us}"


def cpu_cap(name: str, share: float, period_us: int = PERIOD_US, root: Path = CPU_ROOT) -> CpuCap:
    """Create (or reset) the group ``root/name`` limited to ``share`` of one core."""
    quota = cfs_quota(share, period_us)
    path = root / group_name(name)
    if not (root / "cpu.cfs_quota_us").is_file():
        raise RuntimeError(f"no cgroup v1 cpu controller at {root}: cannot cap CPU there")
    try:
        path.mkdir(exist_ok=True)
        # the period first: a quota is checked against the period in force
        (path / "cpu.cfs_period_us").write_text(f"{period_us}\n")
        (path / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    except OSError as exc:
        raise RuntimeError(f"cannot create the CPU cap {path} (root needed): {exc}") from None
    return CpuCap(path, share, quota, period_us)

"""The soak's fault schedule (issue 37): which fault strikes when and where, drawn from a seed so
that a soak can be run again with the same faults at the same times.

One fault every ``every`` seconds (give or take a quarter), the first after the warm-up, the last
at least ``every`` before the end so the crawl's recovery from it is seen, never two at once. The
kinds come in shuffled rounds, so each kind strikes once before any strikes twice:

- ``kill-worker``: SIGKILL one worker process (the soak starts it again);
- ``freeze-hub``: SIGSTOP the hub's Redis for 5 to 10 s, then SIGCONT;
- ``restart-hub``: stop the hub's Redis and start it again from its AOF, as the role configures it;
- ``stop-proxy``: stop one forward proxy for a minute;
- ``ban-storm``: one limited host bans every client address for a minute;
- ``rolling-restart``: every worker stopped gracefully and started again, one at a time;
- ``cut-worker``: one worker cut from the hub for 30 s;
- ``failover``: a Sentinel failover (only when the soak runs on three hubs).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = (
    "kill-worker",
    "freeze-hub",
    "restart-hub",
    "stop-proxy",
    "ban-storm",
    "rolling-restart",
    "cut-worker",
    "failover",
)
JITTER = 0.25  # a fault strikes within every * (1 ± JITTER) of the one before


@dataclass(frozen=True)
class Planned:
    """A fault to inject ``at`` seconds after the soak started, on ``target`` (a worker's name, a
    proxy's address, a host's index; empty for the hub), lasting ``hold`` seconds (0: instant)."""

    at: float
    kind: str
    target: str
    hold: float


def plan(
    duration: float,
    every: float,
    warmup: float,
    workers: tuple[str, ...],
    proxies: tuple[str, ...],
    limited_hosts: tuple[int, ...],
    seed: int,
    sentinel: bool = False,
    cut: bool = True,
) -> list[Planned]:
    """The schedule of a soak of ``duration`` seconds (``sentinel``: on three hubs, so a failover
    may strike; ``cut``: a worker can be cut from the hub). One-line ValueError for a soak that
    cannot have one (what to change is in the message)."""
    if not every > 0:
        raise ValueError(f"the fault interval must be above 0 s, got {every}")
    if not 0 <= warmup < duration - every:
        raise ValueError(
            f"a soak of {duration:g} s has no room for a fault after a {warmup:g} s warm-up "
            f"and before its last {every:g} s"
        )
    if not workers:
        raise ValueError("the soak needs at least one worker")
    kinds = [k for k in KINDS if (sentinel or k != "failover") and (cut or k != "cut-worker")]
    if not proxies:
        kinds.remove("stop-proxy")
    if not limited_hosts:
        kinds.remove("ban-storm")
    rng = random.Random(seed)
    planned: list[Planned] = []
    at, round_ = warmup + every * rng.uniform(0, JITTER), []
    while at <= duration - every:
        if not round_:
            round_ = rng.sample(kinds, len(kinds))
        kind = round_.pop()
        hold = _hold(kind, rng)
        planned.append(Planned(round(at, 1), kind, _target(kind, rng, workers, proxies,
                                                            limited_hosts), hold))  # fmt: skip
        at += hold + every * rng.uniform(1 - JITTER, 1 + JITTER)
    return planned


def _hold(kind: str, rng: random.Random) -> float:
    return {
        "freeze-hub": round(rng.uniform(5, 10), 1),
        "stop-proxy": 60.0,
        "ban-storm": 60.0,
        "cut-worker": 30.0,
    }.get(kind, 0.0)


def _target(
    kind: str,
    rng: random.Random,
    workers: tuple[str, ...],
    proxies: tuple[str, ...],
    limited_hosts: tuple[int, ...],
) -> str:
    if kind in ("kill-worker", "cut-worker"):
        return rng.choice(workers)
    if kind == "stop-proxy":
        return rng.choice(proxies)
    if kind == "ban-storm":
        return str(rng.choice(limited_hosts))
    return ""

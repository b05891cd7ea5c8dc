"""The soak's checkers (issue 37): what a long crawl under faults must show, each a verdict.

Every checker is a pure function of what the soak recorded (the pages the site served, the items
exported, the samples of the hub's memory, the workers' RSS and the crawl's rate, the log lines,
the faults it injected) and returns a :class:`Verdict`: passed or not, one line that says why, and
the evidence (at most ``EVIDENCE`` lines). None reads a clock or a file, so each is shown catching
a planted fault by a test (``tests/unit/soak/test_soak_checkers.py``) before a soak relies on it.

The bounds are the issue's: no reachable page lost; pages fetched more than once at most what was
in flight when the faults struck; every item once after `crawlfleet export`'s de-duplication; the
hub's memory within its budget and flat once the Bloom filter is sized and the sites found; each
worker process's RSS growing at most 10 % after its warm-up (its seen cache full); the crawl back
to 0.9 of its rate before each fault, with the time it took; no ERROR line that no fault explains.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

EVIDENCE = 10  # lines of evidence a verdict keeps (the count is always in its summary)


@dataclass(frozen=True)
class Verdict:
    """One checker's answer: ``ok``, one line ``summary``, and up to ``EVIDENCE`` lines why."""

    name: str
    ok: bool
    summary: str
    evidence: tuple[str, ...] = ()

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'} {self.name}: {self.summary}"


@dataclass(frozen=True)
class Fault:
    """A fault the soak injected, from ``start`` until it was lifted at ``end`` (epoch seconds;
    ``end == start`` for an instant one such as a SIGKILL). ``in_flight``: the requests the
    workers it touched held when it struck (those may be fetched again); ``explains``: patterns
    of the ERROR lines it may cause, expected until ``grace`` seconds after ``end``."""

    name: str
    start: float
    end: float
    in_flight: int = 0
    explains: tuple[str, ...] = ()
    grace: float = 60.0

    def __post_init__(self) -> None:
        if not self.end >= self.start:
            raise ValueError(
                f"fault {self.name}: ends at {self.end} before it starts ({self.start})"
            )
        if self.in_flight < 0 or self.grace < 0:
            raise ValueError(f"fault {self.name}: in_flight and grace must be >= 0")


@dataclass(frozen=True)
class LogLine:
    """One line of a log the soak kept: when, whose log, its level and its text."""

    time: float
    source: str
    level: str
    text: str


@dataclass(frozen=True)
class Samples:
    """A time series: ``(time, value)`` pairs in time order."""

    points: tuple[tuple[float, float], ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, pairs: Iterable[tuple[float, float]]) -> Samples:
        return cls(tuple(sorted((float(t), float(v)) for t, v in pairs)))

    def between(self, start: float, end: float) -> list[float]:
        """The values sampled in ``[start, end)``."""
        return [v for t, v in self.points if start <= t < end]


def _evidence(lines: Iterable[str]) -> tuple[str, ...]:
    return tuple(list(lines)[:EVIDENCE])


def bloom_false_positives(layers: Sequence[tuple[int, int, int]], step: int = 1000) -> float:
    """The number of new requests a Bloom filter is expected to have taken for seen while it
    took its fingerprints: ``layers`` of (bits m, hashes k, fingerprints n), filled in turn (a
    scalable filter's earlier layers are full). A lookup is a false positive when any layer
    answers yes; layer ``i`` with ``x`` fingerprints answers yes with (1 - e^(-kx/m))^k."""
    expected, earlier_no = 0.0, 1.0  # earlier_no: no full earlier layer answers yes
    for m, k, n in layers:
        for done in range(0, n, step):
            chunk = min(step, n - done)
            now = (1 - math.exp(-k * (done + chunk / 2) / m)) ** k
            expected += chunk * (1 - earlier_no * (1 - now))
        earlier_no *= 1 - (1 - math.exp(-k * n / m)) ** k
    return expected


def poisson_upper(mean: float, quantile: float = 0.999) -> int:
    """The smallest x with P(X <= x) >= ``quantile`` for X ~ Poisson(``mean``)."""
    if mean <= 0:
        return 0
    if mean >= 700:  # e^-mean underflows: the normal approximation is exact enough there
        return math.ceil(mean + 3.1 * math.sqrt(mean))
    x = 0
    term = total = math.exp(-mean)
    while total < quantile:
        x += 1
        term *= mean / x
        total += term
    return x


def lost_pages(
    reachable: Iterable[str],
    fetched: Iterable[str],
    seen: Iterable[str] = (),
    orphans: Iterable[str] = (),
    false_positives: float = 0.0,
    queued: int = 0,
) -> Verdict:
    """Every reachable page fetched at least once: 0 lost but to the Bloom filter's false
    positives, and those no more than it is expected to make. ``seen``: lost pages the filter
    answers yes for (taken for seen when found, or found and still queued); ``orphans``: lost
    pages linked only from lost pages (never found); ``false_positives``: the filter's expected
    count (:func:`bloom_false_positives`), at most its 99.9 % Poisson quantile allowed;
    ``queued``: requests still in the hub's queue when the soak stopped (a crawl that did not
    finish in its time): as many of the pages taken for seen are not lost but waiting (a queue
    that dropped requests holds fewer than the pages it owes)."""
    wanted, got = set(reachable), set(fetched)
    lost = wanted - got
    dropped, unfound = lost & set(seen), lost & set(orphans)
    other = sorted(lost - dropped - unfound)
    waiting = min(queued, len(dropped))
    allowed = poisson_upper(false_positives)
    unfinished = (
        f"{waiting} still queued when the soak stopped (the crawl did not finish), "
        if queued
        else ""
    )
    summary = (
        f"{len(wanted) - len(lost)} of {len(wanted)} reachable pages fetched, {len(lost)} "
        f"{'not fetched' if queued else 'lost'}: {unfinished}{len(dropped) - waiting} the Bloom "
        f"filter took for seen (expected {false_positives:.1f}, at most {allowed}), "
        f"{len(unfound - dropped)} linked only from lost pages, {len(other)} otherwise"
    )
    evidence = list(other)
    if len(dropped) - waiting > allowed:
        evidence.insert(0, f"{len(dropped) - waiting} taken for seen, more than the {allowed} "
                           f"the filter explains")  # fmt: skip
    ok = not evidence and bool(wanted)
    return Verdict("lost", ok, summary, _evidence(evidence))


def fetched_again(fetches: Iterable[str], faults: Sequence[Fault]) -> Verdict:
    """Pages fetched more than once, counted, and at most what was in flight at the faults."""
    counts = Counter(fetches)
    extra = sum(n - 1 for n in counts.values())
    bound = sum(f.in_flight for f in faults)
    summary = f"{extra} fetch(es) of a page already fetched, bound {bound} (in flight at faults)"
    again = (f"{page} x{n}" for page, n in counts.most_common() if n > 1)
    return Verdict("re-fetched", extra <= bound, summary, _evidence(again))


def exported_once(exported: Sequence[str], expected: Iterable[str]) -> Verdict:
    """After `crawlfleet export`'s de-duplication: every expected item exactly once, no other."""
    counts, wanted = Counter(exported), set(expected)
    twice = sorted(i for i, n in counts.items() if n > 1)
    missing = sorted(wanted - set(counts))
    stray = sorted(set(counts) - wanted)
    summary = (
        f"{len(counts)} distinct of {len(wanted)} expected: {len(missing)} missing, "
        f"{len(twice)} more than once, {len(stray)} not expected"
    )
    evidence = [f"missing {i}" for i in missing] + [f"twice {i}" for i in twice]
    evidence += [f"not expected {i}" for i in stray]
    ok = not (twice or missing or stray)
    return Verdict("exported once", ok, summary, _evidence(evidence))


def hub_memory(
    memory: Samples,
    budget: float,
    warm_at: float,
    held: Samples | None = None,
    flat: float = 0.10,
    rest: Samples | None = None,
) -> Verdict:
    """The hub's memory (``memory``, all of it) never above ``budget`` bytes, and flat after
    ``warm_at`` (its warm-up over: the Bloom filter sized and every site found): what is judged
    flat is ``rest`` when the soak measured it (every key but the crawl's work, and the server's
    buffers), else ``memory`` less what the queue and the Bloom filter ``held`` at the same moment
    (they grow with the work found, as they should). Flat, for the rest: the median of the last
    quarter of its samples after the warm-up at most ``flat`` (a share) above that of the first
    quarter (a leak climbs; a buffer that comes and goes does not move a median); by
    subtraction: its largest after the warm-up at most ``flat`` above its first."""
    if not memory.points:
        return Verdict("hub memory", False, "no sample of the hub's memory")
    peak_time, peak = max(memory.points, key=lambda p: p[1])
    queue = dict(held.points) if held and rest is None else {}
    judged = rest.points if rest is not None else memory.points
    after = [v - queue.get(t, 0.0) for t, v in judged if t >= warm_at]
    what = (
        " (the rest: other keys, buffers)"
        if rest is not None
        else (" (less the queue and the filter)" if held else "")
    )
    evidence = []
    if peak > budget:
        evidence.append(f"{peak / 2**20:.1f} MiB at {peak_time:.0f} > budget {budget / 2**20:.1f}")
    growth = 0.0
    if after and rest is not None:  # measured directly: the medians of its quarters
        quarter = max(1, len(after) // 4)
        first, last = statistics.median(after[:quarter]), statistics.median(after[-quarter:])
        growth = last / first - 1 if first > 0 else 0.0
    elif after:  # by subtraction: from its first sample to its largest
        growth = max(after) / after[0] - 1 if after[0] > 0 else 0.0
    if after:
        if growth > flat:
            evidence.append(f"grew {growth:.1%} after warm-up (limit {flat:.0%}){what}")
    else:
        evidence.append("no sample after warm-up")
    summary = (
        f"peak {peak / 2**20:.1f} MiB of a {budget / 2**20:.1f} MiB budget, "
        f"{growth:+.1%} after warm-up{what}"
    )
    return Verdict("hub memory", not evidence, summary, _evidence(evidence))


def worker_rss(
    rss: Mapping[str, Samples],
    warmup: float,
    growth: float = 0.10,
    full: Mapping[str, float] | None = None,
) -> Verdict:
    """Each worker process's RSS (keyed by process: a restarted worker is a new one) grows at most
    ``growth`` from its first sample after its warm-up to its largest after. The warm-up ends
    ``warmup`` seconds after its own first sample and, when ``full`` says when each process's
    cache of seen fingerprints (``SCHEDULER_SEEN_CACHE``, bounded) was full, not before: until
    then its memory has a bounded reason to grow. A process that did not live past its warm-up
    (or whose cache never filled) is counted, not judged."""
    judged, short, evidence = 0, 0, []
    for process, samples in sorted(rss.items()):
        if not samples.points or (full is not None and process not in full):
            short += 1
            continue
        ready = samples.points[0][0] + warmup
        if full is not None:
            ready = max(ready, full[process])
        after = [v for t, v in samples.points if t >= ready]
        if len(after) < 2:
            short += 1
            continue
        judged += 1
        grew = max(after) / after[0] - 1 if after[0] > 0 else 0.0
        if grew > growth:
            evidence.append(f"{process} grew {grew:.1%} after warm-up (limit {growth:.0%})")
    summary = (
        f"{judged} process(es) judged, {len(evidence)} grew more than {growth:.0%}, "
        f"{short} did not outlive the warm-up"
    ) + (" (its seen cache full)" if full is not None else "")
    return Verdict("worker RSS", judged > 0 and not evidence, summary, _evidence(evidence))


def filled(seen: Mapping[str, Samples], size: int) -> dict[str, float]:
    """When each process's seen cache (``seen``: the fingerprints it held, sampled) first held
    ``size``; a process whose cache never filled is absent."""
    return {
        process: next(t for t, v in samples.points if v >= size)
        for process, samples in seen.items()
        if any(v >= size for _, v in samples.points)
    }


def sites_found(served: Iterable[tuple[float, str]]) -> float:
    """When the crawl first fetched a page of the last host it found (``served``: (time, host) of
    the pages served): the hub keeps state per site, so its memory grows until then."""
    first: dict[str, float] = {}
    for when, host in served:
        if when < first.get(host, math.inf):
            first[host] = when
    return max(first.values(), default=0.0)


def recovery(
    served: Iterable[tuple[float, str]],
    faults: Sequence[Fault],
    before: float = 60.0,
    window: float = 30.0,
    target: float = 0.9,
    within: float = 600.0,
    step: float = 5.0,
) -> tuple[Verdict, dict[str, float | None]]:
    """After each fault, the crawl back to ``target`` of its rate before it, judged from the pages
    ``served`` (``(time, host)`` per page). Its rate before: the ``before`` seconds up to the
    fault. Recovered at the first ``t`` (every ``step`` s from the fault's end, within
    ``within`` s) where, over ``[t, t + window)``, either

    - the whole crawl's rate is back to ``target`` of its rate before, or
    - the hosts with work left after that window (served at or after ``t + window``) are served
      at ``target`` of their rate before: the rate the remaining work allows. A crawl whose
      tail is one rate-limited host can never again reach its rate across many hosts; its tail
      host back at its own pace is a recovery, that host still slow is not.

    Returns the verdict and each fault's seconds to recover (None: it did not), keyed by
    :func:`fault_key`. A fault with no page served before it, or lifted less than ``window``
    before the last page served (the crawl ended first), is not judged and not listed; a soak
    whose faults were all unjudged fails (it showed no recovery)."""
    per_second: dict[int, Counter[str]] = {}
    last: dict[str, float] = {}
    for when, host in served:
        per_second.setdefault(int(when), Counter())[host] += 1
        last[host] = max(last.get(host, when), when)
    end_of_crawl = max(last.values(), default=0.0)

    def count(start: float, end: float, hosts: set[str] | None = None) -> int:
        seconds = (per_second.get(s) for s in range(int(start), int(end)))
        return sum(
            (c.total() if hosts is None else sum(n for h, n in c.items() if h in hosts))
            for c in seconds
            if c
        )

    times: dict[str, float | None] = {}
    evidence = []
    for fault in faults:
        level = count(fault.start - before, fault.start) / before
        if level <= 0 or fault.end + window > end_of_crawl:
            continue
        took = None
        t = fault.end
        while t + window <= min(fault.end + within, end_of_crawl):
            got = count(t, t + window) / window
            still = {h for h, at in last.items() if at >= t + window}
            open_before = count(fault.start - before, fault.start, still) / before
            open_now = count(t, t + window, still) / window
            if got >= target * level or open_now >= target * open_before:
                took = t - fault.start
                break
            t += step
        times[fault_key(fault.name, fault.start)] = took
        if took is None:
            evidence.append(
                f"{fault.name} at {fault.start:.0f}: not back to {target:.0%} of {level:.1f}/s, "
                f"nor its open hosts to theirs, within {within:.0f} s"
            )
    worst = max((t for t in times.values() if t is not None), default=0.0)
    summary = (
        f"{len(times)} of {len(faults)} fault(s) judged, {len(evidence)} not recovered, "
        f"slowest recovery {worst:.0f} s"
    )
    ok = not evidence and (bool(times) or not faults)
    if faults and not times:
        summary += " (the crawl ended before any could be judged)"
    return Verdict("recovery", ok, summary, _evidence(evidence)), times


def fault_key(name: str, start: float) -> str:
    """How the record and the report name one fault (a kind may strike twice)."""
    return f"{name} at {start:.0f}"


def schedule_played(planned: int, faults: Sequence[Fault], crawl_end: float) -> Verdict:
    """Every planned fault struck, and each while the crawl was still running (a crawl that ends
    before its schedule was not soaked in the faults it skipped)."""
    late = [f for f in faults if f.start >= crawl_end]
    summary = (
        f"{len(faults)} of {planned} planned fault(s) injected, {len(late)} after the crawl ended"
    )
    evidence = [f"{f.name} at {f.start:.0f}: the crawl ended at {crawl_end:.0f}" for f in late]
    ok = len(faults) == planned and not late
    return Verdict("schedule", ok, summary, _evidence(evidence))


def unexplained_errors(lines: Iterable[LogLine], faults: Sequence[Fault]) -> Verdict:
    """Every ERROR line (any case of the level) explained by a fault: within its time, up to its
    ``grace`` after it is lifted, and matching one of its patterns."""
    patterns = [(f, [re.compile(p) for p in f.explains]) for f in faults]
    errors = explained = 0
    evidence = []
    for line in lines:
        if line.level.lower() not in ("error", "critical"):
            continue
        errors += 1
        if any(
            f.start <= line.time <= f.end + f.grace and any(p.search(line.text) for p in found)
            for f, found in patterns
        ):
            explained += 1
        else:
            evidence.append(f"{line.source} at {line.time:.0f}: {line.text[:200]}")
    summary = f"{errors} ERROR line(s), {explained} explained by a fault, {len(evidence)} not"
    return Verdict("errors explained", not evidence, summary, _evidence(evidence))

"""`crawlfleet status [SPIDER] [--watch] [--json]`: what every crawl on the hub is doing now.

Per spider: queued, leased (per worker), acknowledged, failed, dead letters, items, pages per
minute per worker over the last minute, Bloom filter fill and estimated false-positive rate,
pool sizes, live workers with their heartbeat age, the politeness keys with the limit that
binds the crawl now (site, workers, hub or none: ``views.politeness.bound_by``), the hub's memory (a
full hub, refusing writes at ``maxmemory``, in red) and the active alerts
(``crawlfleet.alerts``, docs/alerts.md). ``--watch`` redraws
in place (rich) with a progress bar toward the spider's known total; ``--json`` prints the
documented, stable schema (docs/reference/status-json.md), one object per snapshot.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from rich.console import Console, Group, OverflowMethod
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from crawlfleet.alerts.store import current_alerts
from crawlfleet.commands.check import validate_pool_url
from crawlfleet.commands.opsargs import (
    UsageError,
    add_pool_args,
    add_redis_arg,
    check_spider,
    connect,
    pool_config,
    run_guarded,
)
from crawlfleet.hub.errors import RedisUrlError
from crawlfleet.hub.urls import validate_url
from crawlfleet.views.bloom import DupefilterCache
from crawlfleet.views.cluster import cluster_snapshot
from crawlfleet.views.crawl import require_spider
from crawlfleet.views.hub import HubProbe

# Politeness keys listed per crawl (``--json`` has POLITENESS_KEYS of them).
STATUS_KEYS = 10
_BOUND_STYLE = {"none": "dim", "workers": "cyan", "site": "yellow", "hub": "red"}
_STATE_STYLE = {"full": "yellow", "cooling": "red", "banned": "red", "idle": "dim"}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("status", help="queues, workers, rates and pools of every crawl")
    p.add_argument("spider", nargs="?", help="only this spider (default: every spider found)")
    p.add_argument("--json", action="store_true", help="print JSON (docs/reference/status-json.md)")
    p.add_argument("--watch", action="store_true", help="redraw every --interval seconds")
    p.add_argument(
        "--interval", type=float, default=2.0, help="seconds between redraws (default 2)"
    )
    p.add_argument(
        "--count", type=int, default=0, help="with --watch: stop after N snapshots (0 = never)"
    )
    add_redis_arg(p)
    add_pool_args(p)
    p.set_defaults(run=run)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _printable(text: str, limit: int = 200) -> str:
    """``text`` from Redis as a terminal shows it safely: control and other unprintable
    characters as ``?``, at most ``limit`` characters (``…`` beyond)."""
    shown = "".join(c if c.isprintable() else "?" for c in text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def render_spider(view: dict[str, Any]) -> Group:
    state = "[yellow]paused[/]" if view["paused"] else "running"
    if not view["workers_alive"]:
        state = "[yellow]paused[/], no workers" if view["paused"] else "no workers alive"
    title = f"[b]{view['spider']}[/b] — {state}"
    table = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column(style="dim")
    table.add_column()
    df = view["dupefilter"]
    if df["fill_ratio"] is not None:
        dupe = (
            f"{df['class']} {df['key']}: fill {df['fill_ratio']:.2%}, est. false positives "
            f"{df['error_rate']:.2g} (designed {df['design_error_rate']:g}), "
            f"~{_fmt(df['fingerprints'])} fingerprints"
        )
    else:
        dupe = f"{df['class'] or '-'}: {_fmt(df['fingerprints'])} fingerprints"
    rows: list[tuple[str, str | Text]] = [
        ("queued", f"{_fmt(view['queued'])}  (+{_fmt(view['start_urls'])} start URLs waiting)"),
        ("leased", _fmt(view["leased"])),
        ("acknowledged", _fmt(view["acked"])),
        ("failed", _fmt(view["failed"])),
        ("dead letters", _fmt(view["deadletter"])),
        ("items", _fmt(view["items"])),
        ("pages/min", _fmt(view["pages_per_minute"])),
        ("dupefilter", dupe),
    ]
    pol = view["politeness"]
    rows.append(
        ("limit", Text(f"{pol['bound']} — {pol['reason']}", style=_BOUND_STYLE[pol["bound"]]))
    )
    for name, value in rows:
        table.add_row(name, value)
    total, items = view["total"], view["items"]
    if total:
        done = min(items or 0, total)
        bar = Table.grid(padding=(0, 1))
        bar.add_row(ProgressBar(total=total, completed=done, width=40), f"{done:,}/{total:,}")
        table.add_row("progress", bar)
    parts: list[Any] = [table]
    if view["workers"]:
        parts.append(_workers_table(view["workers"]))
        parts.extend(
            Text(
                f"waiting: {_printable(w['id'])} for {_age(w.get('waiting_for'))}: "
                f"{_printable(w['waiting'])}",
                "yellow",
            )
            for w in view["workers"]
            if w.get("waiting") and w["alive"]
        )
    if pol["keys"]:
        parts.append(_keys_table(pol))
    parts.extend(Text(f"warning: {w}", style="yellow") for w in pol["warnings"])
    return Group(*parts)


def _table(columns: tuple[str, ...], left: int, overflow: OverflowMethod = "ellipsis") -> Table:
    """A plain table of ``columns``: the first ``left`` of them text, the others numbers."""
    table = Table(box=None, pad_edge=False, header_style="dim")
    for n, column in enumerate(columns):
        table.add_column(column, justify="left" if n < left else "right", overflow=overflow)
    return table


def _keys_table(pol: dict[str, Any]) -> Table:
    """The politeness keys, most recently used first (STATUS_KEYS of them)."""
    columns = (
        "site",
        "proxy",
        "state",
        "phase",
        "budget/s",
        "clean/s",
        "learned/s",
        "ceiling/s",
        "cap/s",
        "cool-down",
        "bans 5m",
    )
    table = _table(columns, left=3)
    for k in pol["keys"][:STATUS_KEYS]:
        table.add_row(
            k["site"],
            k["proxy"] or "-",
            Text(k["state"], style=_STATE_STYLE.get(k["state"], "")),
            k["phase"],
            _fmt(k["budget"], 2),
            _fmt(k["observed"], 2),
            _fmt(k["learned"], 2),
            _fmt(k["ceiling"], 2),
            _fmt(k["cap"], 2),
            _age(k["cooldown"]) if k["cooldown"] else "-",
            _fmt(k["bans_recent"]),
        )
    more = len(pol["keys"]) - STATUS_KEYS
    if more > 0:
        table.add_row(f"… {more} more (--json)", *[""] * (len(columns) - 1))
    return table


def _workers_table(workers: list[dict[str, Any]]) -> Table:
    columns = (
        "worker",
        "state",
        "release",
        "heartbeat",
        "leased",
        "acked",
        "pages/min",
        "items/min",
    )
    # Worker ids are what operators grep for: fold them rather than cut them short.
    table = _table(columns, left=3, overflow="fold")
    for w in workers:
        if w["alive"] and w.get("waiting"):
            state = Text("waiting", style="yellow")
        elif w["alive"]:
            state = Text("alive", style="green")
        elif w["registered"]:
            state = Text("late", style="red")
        else:
            state = Text("stopped" if w["stopped"] else "gone", style="dim")
        release = f"{w['project']} {w['version'] or ''}".strip() if w.get("project") else "-"
        table.add_row(
            w["id"],
            state,
            release,
            _age(w["heartbeat_age"]),
            _fmt(w["leased"]),
            _fmt(w["acked"]),
            _fmt(w["pages_per_minute"]),
            _fmt(w["items_per_minute"]),
        )
    return table


def render_alerts(alerts: list[dict[str, Any]], now: float) -> list[Text]:
    """One line per active alert (docs/alerts.md), or a line saying there is none."""
    if not alerts:
        return [Text("alerts: none", style="green")]
    lines = [Text(f"alerts: {len(alerts)} active", style="bold red")]
    for alert in alerts:
        style = "red" if alert["severity"] == "critical" else "yellow"
        since = max(0.0, now - alert["since"])
        lines.append(Text(f"  {alert['name']}: {alert['summary']} (for {since:.0f}s)", style=style))
    return lines


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def render_hub(hub: dict[str, Any]) -> list[Text]:
    """The hub's round trip, CPU and memory; a full hub (Redis refusing writes) in red."""
    cpu = "" if hub["cpu"] is None else f", CPU {hub['cpu']:.0%} of a core"
    used, limit = hub.get("used_memory"), hub.get("maxmemory")
    memory = ""
    if used is not None and limit:
        memory = f", memory {_mib(used)} of maxmemory {_mib(limit)} ({used / limit:.0%})"
    lines = [Text(f"hub: PING {hub['rtt_ms']:.1f} ms{cpu}{memory}", style="dim")]
    if hub.get("full") and used is not None and limit:
        refused = hub.get("oom_refusals")
        count = "" if refused is None else f"; {refused:,} commands refused since it started"
        lines.append(
            Text(
                f"hub FULL: Redis uses {_mib(used)}, {_mib(max(used - limit, 0))} over its "
                f"maxmemory of {_mib(limit)}, and refuses writes{count}. Workers keep what they "
                "have and pause until memory frees (raise maxmemory, or purge finished crawls)",
                style="bold red",
            )
        )
    return lines


def render(view: dict[str, Any]) -> Group:
    parts: list[Any] = [Text(f"crawlfleet status — {view['redis']}", style="bold")]
    if "alerts" in view:
        parts.extend(render_alerts(view["alerts"], view["hub"]["time"]))
    if not view["spiders"]:
        parts.append(Text("no crawls found (no <spider>:frontier hash on this Redis)"))
    for spider in view["spiders"]:
        parts.append(Text(""))
        parts.append(render_spider(spider))
    parts.extend(render_hub(view["hub"]))
    pools = view["pools"]
    if pools:
        parts.append(Text(""))
        for name, entry in pools.items():
            where = f"{name} ({entry.get('site')})" if entry.get("site") else name
            if entry["error"]:
                parts.append(Text(f"{where}: unavailable — {entry['error']}", style="red"))
            else:
                parts.append(Text(f"{where}: {entry['count']:,} available"))
    return Group(*parts)


def _console() -> Console:
    console = Console()
    # Piped output (logs, grep) is not cut to rich's default 80 columns.
    return console if console.is_terminal else Console(width=160)


def _run(args: argparse.Namespace) -> int:
    if not 0 < args.interval <= 3600:  # also refuses nan
        raise UsageError(f"--interval must be > 0 and <= 3600 seconds, got {args.interval}")
    if args.count < 0:
        raise UsageError(f"--count must be >= 0, got {args.count}")
    if args.spider is not None:
        check_spider(args.spider)
    if args.redis_url:
        try:
            validate_url(args.redis_url, "REDIS_URL (--redis-url)")
        except RedisUrlError as exc:
            raise UsageError(str(exc)) from None
    validate_pool_url(args.proxypool_url, "PROXYPOOL_URL", "--proxypool-url")
    validate_pool_url(args.accountpool_url, "ACCOUNTPOOL_URL", "--accountpool-url")
    client = connect(args.redis_url)
    spiders = [args.spider] if args.spider else None
    if args.spider:
        require_spider(client, args.spider, args.redis_url)
    pools = pool_config(args)
    # --watch redraws often; the Bloom filter's figures are refreshed every 30 s.
    dupes = DupefilterCache()
    # --watch: Redis's CPU share since the previous snapshot (null in a single one).
    probe = HubProbe()

    def take() -> dict[str, Any]:
        view = cluster_snapshot(
            client, args.redis_url, spiders, pools, dupefilter_cache=dupes, hub_probe=probe
        )
        found = current_alerts(client, view, save=spiders is None)
        view["alerts"] = [alert.to_json() for alert in found]
        return view

    if not args.watch:
        view = take()
        if args.json:
            print(json.dumps(view, sort_keys=True))
        else:
            _console().print(render(view))
        return 0
    shown = 0
    try:
        if args.json:
            while True:
                print(json.dumps(take(), sort_keys=True), flush=True)
                shown += 1
                if args.count and shown >= args.count:
                    return 0
                time.sleep(args.interval)
        with Live(render(take()), console=_console(), auto_refresh=False) as live:
            shown = 1
            while not (args.count and shown >= args.count):
                time.sleep(args.interval)
                live.update(render(take()), refresh=True)
                shown += 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    return run_guarded("status", _run, args)

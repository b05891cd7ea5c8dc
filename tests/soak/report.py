"""The soak's report: ``soak.html`` (the verdicts, the faults with their recovery times, and five
charts over time with every fault marked: pages/s, the hub's memory, each worker process's RSS,
the queue and refusals/s) and ``soak.png``, the same page as headless Chromium draws it.

The charts are inline SVG written here (no plotting library): each a polyline per series over
the soak's time axis in minutes, a shaded band per fault from its start to its end.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from soak.checkers import fault_key
from support.dashboard import browser

WIDTH, HEIGHT, PAD = 900, 160, 40
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def chart(
    title: str,
    series: dict[str, Sequence[tuple[float, float]]],
    faults: Sequence[dict[str, Any]],
    start: float,
    unit: str,
) -> str:
    """One SVG chart: ``series`` (name -> (epoch seconds, value)) over minutes since ``start``."""
    points = [p for values in series.values() for p in values]
    if not points:
        return f"<h3>{html.escape(title)}</h3><p>no samples</p>"
    t_max = max(max(t for t, _ in points) - start, 1.0)
    v_max = max(max(v for _, v in points), 1e-9)

    def x(t: float) -> float:
        return PAD + (t - start) / t_max * (WIDTH - 2 * PAD)

    def y(v: float) -> float:
        return HEIGHT - PAD / 2 - v / v_max * (HEIGHT - PAD)

    parts = [f'<svg width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">']
    for fault in faults:
        x0, x1 = x(fault["start"]), max(x(fault["end"]), x(fault["start"]) + 2)
        parts.append(
            f'<rect x="{x0:.1f}" y="0" width="{x1 - x0:.1f}" height="{HEIGHT - PAD / 2}" '
            f'fill="#f4b183" opacity="0.5"><title>{html.escape(fault["name"])}</title></rect>'
        )
    for colour, (name, values) in zip(COLOURS * 20, series.items(), strict=False):
        line = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in values)
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{line}">'
            f"<title>{html.escape(name)}</title></polyline>"
        )
    base = HEIGHT - PAD / 2
    parts.append(f'<line x1="{PAD}" y1="{base}" x2="{WIDTH - PAD}" y2="{base}" stroke="#444"/>')
    parts.append(f'<text x="{PAD}" y="12" font-size="11">{v_max:,.1f} {html.escape(unit)}</text>')
    parts.append(
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 2}" font-size="11" text-anchor="end">'
        f"{t_max / 60:.0f} min</text></svg>"
    )
    legend = " · ".join(
        f'<span style="color:{c}">{html.escape(n)}</span>'
        for c, n in zip(COLOURS * 20, series, strict=False)
    )
    return f"<h3>{html.escape(title)}</h3><div>{legend}</div>{''.join(parts)}"


def page(record: dict[str, Any]) -> str:
    start = record["started"]
    ok = [s for s in record["samples"] if "error" not in s]
    faults = record["faults"]
    step = record["sample_seconds"]
    rss: dict[str, list[tuple[float, float]]] = {}
    for s in ok:
        for process, value in s["rss"].items():
            rss.setdefault(process, []).append((s["t"], value / 2**20))
    # a count per sample over the time since the one before (a sample that took long, as one
    # over ssh to a host cut from the network does, counts more than its 5 s)
    since = [step] + [max(b["t"] - a["t"], 1e-3) for a, b in pairwise(ok)]
    memory = {
        "used_memory": [(s["t"], s["memory"] / 2**20) for s in ok],
        "less the items stream": [(s["t"], (s["memory"] - s["items_memory"]) / 2**20)
                                  for s in ok],
    }  # fmt: skip
    if ok and all("other_memory" in s for s in ok):  # the rest, measured directly
        memory["other keys and buffers"] = [
            (s["t"], (s["other_memory"] + s["buffers_memory"]) / 2**20) for s in ok
        ]
    else:
        memory["less the items, the queue and the filter"] = [
            (s["t"], (s["memory"] - s["items_memory"] - s.get("queue_memory", 0)
                      - s.get("filter_memory", 0)) / 2**20) for s in ok]  # fmt: skip
    charts = [
        chart("pages/s", {"served": [(s["t"], s["served"] / d) for s, d in zip(ok, since)]},
              faults, start, "pages/s"),
        chart("hub memory", memory, faults, start, "MiB"),
        chart("worker RSS", rss, faults, start, "MiB"),
        chart("queue", {"queued": [(s["t"], s["queued"] or 0) for s in ok],
                        "leased": [(s["t"], s["leased"] or 0) for s in ok]}, faults, start,
              "requests"),
        chart("refused and failed/s", {
            "403/429": [(s["t"], s["refused"] / d) for s, d in zip(ok, since)],
            "500": [(s["t"], s["failed"] / d) for s, d in zip(ok, since)]}, faults, start, "/s"),
    ]  # fmt: skip
    verdicts = "".join(
        f"<li><b>{'PASS' if v['ok'] else 'FAIL'}</b> {html.escape(v['name'])}: "
        f"{html.escape(v['summary'])}</li>"
        for v in record["verdicts"]
    )
    rows = "".join(
        f"<tr><td>{(f['start'] - start) / 60:.1f}</td><td>{html.escape(f['name'])}</td>"
        f"<td>{f['end'] - f['start']:.0f}</td><td>{f['in_flight']}</td>"
        f"<td>{_took(record['recovery'], fault_key(f['name'], f['start']))}</td></tr>"
        for f in faults
    )
    head = (
        f"{record['pages']:,} pages over {record['args']['hosts']} hosts, "
        f"{record['args']['workers']} workers, seed {record['args']['seed']}: "
        f"{record['distinct']:,} fetched ({record['fetched']:,} fetches) in "
        f"{record.get('crawl_seconds', 0) / 60:.0f} min, {len(faults)} faults"
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>crawlfleet soak</title>"
        "<style>body{font:13px sans-serif;margin:16px;width:940px}td,th{padding:2px 8px}</style>"
        f"</head><body><h2>crawlfleet soak</h2><p>{html.escape(head)}</p><ul>{verdicts}</ul>"
        "<table><tr><th>min</th><th>fault</th><th>s</th><th>in flight</th>"
        f"<th>back to 0.9 (s from its start)</th></tr>{rows}</table>{''.join(charts)}</body></html>"
    )


def _took(recovery: dict[str, float | None], name: str) -> str:
    if name not in recovery:
        return "not judged"
    took = recovery[name]
    return "not recovered" if took is None else f"{took:.0f} s"


def write(record: dict[str, Any], out: Path) -> None:
    """``soak.html`` and ``soak.png`` (headless Chromium's picture of it) into ``out``."""
    target = out / "soak.html"
    target.write_text(page(record), encoding="utf-8")
    driver = browser(out / "work")
    try:
        driver.set_window_size(980, 1900)  # every chart on the picture
        driver.get(target.resolve().as_uri())
        driver.save_screenshot(str(out / "soak.png"))
    finally:
        driver.quit()

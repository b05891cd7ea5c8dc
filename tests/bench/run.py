"""`make bench`: run every tests/bench/bench_*.py scenario side by side and write a results table.

Each module exposes ``run(ctx) -> list[dict]`` returning rows with the keys of ``Row``. Results go
to ``results/bench.json`` and ``results/bench.md``; a module that fails is reported, not fatal.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from redis_server import RedisServer, start_redis

ROOT = Path(__file__).resolve().parents[2]


class Row(TypedDict):
    section: str
    scenario: str
    metric: str
    value: float
    unit: str
    note: str


@dataclass
class BenchContext:
    workdir: Path
    peer_python: Path
    quick: bool
    _servers: list[RedisServer] = field(default_factory=list)

    def start_redis(self) -> RedisServer:
        """A fresh redis-server in its own directory, stopped when the module's run ends."""
        path = self.workdir / f"redis-{len(self._servers)}"
        shutil.rmtree(path, ignore_errors=True)  # no AOF replay of an earlier module's data
        path.mkdir(parents=True)
        server = start_redis(path)
        self._servers.append(server)
        return server

    def stop_servers(self) -> None:
        for server in self._servers:
            server.stop()
        self._servers.clear()


def discover(only: list[str]) -> list[Path]:
    """The modules to run: all, or for each name of ``only`` the module ``bench_<name>`` when
    there is one (``--only lab`` is bench_lab.py alone), else those whose name contains it."""
    modules = sorted(Path(__file__).parent.glob("bench_*.py"))
    if not only:
        return modules
    stems = {m.stem for m in modules}

    def chosen(module: Path) -> bool:
        return any(
            module.stem == f"bench_{name}" if f"bench_{name}" in stems else name in module.stem
            for name in only
        )

    return [m for m in modules if chosen(m)]


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as import does: dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def to_markdown(rows: list[Row], failures: dict[str, str], meta: dict[str, str]) -> str:
    lines = [f"# crawlfleet benchmarks ({meta['date']}, {meta['machine']})", ""]
    for section in dict.fromkeys(r["section"] for r in rows):
        lines += [
            f"## {section}",
            "",
            "| scenario | metric | value | unit | note |",
            "|---|---|---:|---|---|",
        ]
        for r in rows:
            if r["section"] == section:
                value = f"{r['value']:.4g}" if isinstance(r["value"], float) else r["value"]
                lines.append(
                    f"| {r['scenario']} | {r['metric']} | {value} | {r['unit']} | {r['note']} |"
                )
        lines.append("")
    for name, error in failures.items():
        lines += [f"## {name}: FAILED", "", "```", error.strip(), "```", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--only",
        nargs="*",
        default=[],
        help="run bench_NAME.py (or, when there is none, the modules whose name contains NAME)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    parser.add_argument("--peer-python", type=Path, default=ROOT / ".bench/peers-venv/bin/python")
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    workdir = ROOT / ".bench" / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    ctx = BenchContext(workdir=workdir, peer_python=args.peer_python, quick=args.quick)
    rows: list[Row] = []
    failures: dict[str, str] = {}
    for path in discover(args.only):
        started = time.monotonic()
        print(f"== {path.stem}", flush=True)
        try:
            rows += load(path).run(ctx)
        except Exception:
            failures[path.stem] = traceback.format_exc()
            print(failures[path.stem], file=sys.stderr)
        finally:
            ctx.stop_servers()
        print(f"   {time.monotonic() - started:.1f} s", flush=True)

    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()} {platform.machine()} python {platform.python_version()}",
    }
    (args.out / "bench.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "failures": failures}, indent=2)
    )
    (args.out / "bench.md").write_text(to_markdown(rows, failures, meta))
    print(
        f"results: {args.out / 'bench.md'} and bench.json ({len(rows)} rows, "
        f"{len(failures)} failed modules)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

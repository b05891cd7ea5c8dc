"""The settings table (``crawlfleet.settingtable``) is the one place a worker setting is declared.

Read from the source (``ast``): every setting a worker component reads is a row of the table,
every row is read by a component, and no component passes a default of its own where it reads a
setting of the table (a literal beside the name, or ``settings.get(NAME) or <literal>``): the
default it gets is the table's, which the reference page shows (``scripts/gendocs.py`` generates
``docs/reference/settings.md``'s tables from the same rows; ``make lint`` fails on drift). Each
source check is shown catching a planted fault first.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scrapy.settings import Settings
from support import packages

from crawlfleet.frontier.bloomlayout import layout_from_settings
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.politeness.config import PolitenessConfig
from crawlfleet.settingtable import SCRAPY_SETTINGS, SECTIONS, SETTINGS, Also, default, unknown

PACKAGE = Path(__file__).resolve().parents[3] / "project" / "crawlfleet"
# The hub's floor declares the values the table rows name (key templates, URL, params): it
# stands on nothing of crawlfleet's, so it cannot read them from the table.
HUB = ("crawlfleet.hub",)
NAME = re.compile(
    r"SCHEDULER|(?:SCHEDULER|REDIS|BLOOMFILTER|POLITENESS|PROXYPOOL|ACCOUNTPOOL|AUTHORIZATION"
    r"|ITEMS|WORKERSTATS|RABBITMQ|DUPEFILTER|FLEET|CRAWLFLEET_CA)(?:_[A-Z0-9]+)+"
)
# The middlewares' shared pool client reads "<pool>_URL" … for both pools.
POOLS = ("PROXYPOOL", "ACCOUNTPOOL")


def sources(root: Path, modules: tuple[str, ...]) -> Iterator[tuple[str, ast.Module]]:
    """Each module (or each module of a package) named, below the package's folder ``root``."""
    for module in modules:
        path = root / module.removeprefix("crawlfleet.").replace(".", "/")
        if not path.is_dir():
            path = path.with_suffix(".py")
        if not path.exists():
            continue
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            yield str(file.relative_to(root)), ast.parse(file.read_text(encoding="utf-8"))


def names_read(tree: ast.Module) -> set[str]:
    """Every whole string constant that looks like a setting's name, and the names an f-string
    over ``pool`` spells for each pool."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if NAME.fullmatch(node.value):
                found.add(node.value)
        elif isinstance(node, ast.JoinedStr) and len(node.values) == 2:
            head, tail = node.values
            if (
                isinstance(head, ast.FormattedValue)
                and isinstance(head.value, ast.Name)
                and head.value.id == "pool"
                and isinstance(tail, ast.Constant)
            ):
                found |= {f"{pool}{tail.value}" for pool in POOLS}
    return found


def _literal(node: ast.expr) -> bool:
    """A value written beside the name (``""`` is no default: ``or ""`` only makes text)."""
    if isinstance(node, ast.Constant):
        return node.value not in (None, "")
    if isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
        return True
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    return isinstance(node, ast.Name) and "DEFAULT" in node.id


def _not_its_own(name: str, node: ast.expr) -> bool:
    """A default beside ``name`` that is not the table's for it: a literal, or ``default()`` of
    another setting (a name typed twice, once wrong)."""
    if _literal(node):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "default"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value != name
    )


def _setting_arg(call: ast.Call, table: set[str]) -> int | None:
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Constant) and arg.value in table:
            return index
    return None


def own_defaults(where: str, tree: ast.Module, table: set[str]) -> Iterator[str]:
    """Places that read a setting of the table with a default of their own."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (index := _setting_arg(node, table)) is not None:
            name = node.args[index].value  # type: ignore[attr-defined]
            given = node.args[index + 1 :] + [
                k.value for k in node.keywords if k.arg in ("default", "fallback")
            ]
            if any(_not_its_own(name, arg) for arg in given):
                yield f"{where}:{node.lineno} reads {name} with a default of its own"
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            first = node.values[0]
            if not isinstance(first, ast.Call):
                continue
            index = _setting_arg(first, table)
            name = None if index is None else first.args[index].value  # type: ignore[attr-defined]
            if name is not None and any(_not_its_own(name, v) for v in node.values[1:]):
                yield f"{where}:{node.lineno} reads {name} with a default of its own"


def scan(root: Path, table: set[str]) -> tuple[set[str], list[str]]:
    read: set[str] = set()
    faults: list[str] = []
    for where, tree in sources(root, packages.WORKER_SIDE):
        read |= names_read(tree)
        faults += own_defaults(where, tree, table)
    for _, tree in sources(root, HUB):
        read |= names_read(tree)
    return read, faults


# -- the source checks, first catching planted faults -------------------------------------------


def test_the_checks_catch_planted_faults(tmp_path: Path) -> None:
    root = tmp_path / "crawlfleet"
    (root / "frontier").mkdir(parents=True)
    (root / "hub").mkdir()
    (root / "hub" / "keys.py").write_text('KEY = KeySetting("ITEMS_KEY", "%(spider)s:items")\n')
    (root / "frontier" / "config.py").write_text(
        "def f(settings, pool):\n"
        '    a = settings.getint("SCHEDULER_PREFETCH", 8)\n'
        '    b = settings.get("SCHEDULER_SERIALIZER") or "msgpack"\n'
        '    c = _number(settings, "POLITENESS_GROWTH", 2.0, positive=True)\n'
        '    d = settings.get("SCHEDULER_URL_SCHEMES", DEFAULT_URL_SCHEMES)\n'
        '    e = settings.getfloat(f"{pool}_TIMEOUT", default(f"{pool}_TIMEOUT"))\n'
        '    g = _number(settings, "POLITENESS_WINDOW", positive=True)\n'
        '    h = settings.get("POLITENESS_RATES")\n'
        '    i = settings.getint("SCHEDULER_PREFETCH", default("SCHEDULER_SHARDS"))\n'
        '    j = settings.get("SCHEDULER_SERIALIZER") or default("SCHEDULER_SERIALIZER")\n'
    )
    table = {"SCHEDULER_PREFETCH", "SCHEDULER_SERIALIZER", "POLITENESS_GROWTH"}
    table |= {"SCHEDULER_URL_SCHEMES", "POLITENESS_WINDOW"}
    read, faults = scan(root, table)
    assert faults == [
        "frontier/config.py:2 reads SCHEDULER_PREFETCH with a default of its own",
        "frontier/config.py:3 reads SCHEDULER_SERIALIZER with a default of its own",
        "frontier/config.py:4 reads POLITENESS_GROWTH with a default of its own",
        "frontier/config.py:5 reads SCHEDULER_URL_SCHEMES with a default of its own",
        "frontier/config.py:9 reads SCHEDULER_PREFETCH with a default of its own",
    ]
    assert {"PROXYPOOL_TIMEOUT", "ACCOUNTPOOL_TIMEOUT", "ITEMS_KEY", "POLITENESS_RATES"} <= read
    assert "POLITENESS_WINDOW" in read


def test_no_worker_component_has_a_default_of_its_own() -> None:
    _, faults = scan(PACKAGE, set(SETTINGS))
    assert faults == []


def test_every_setting_a_worker_reads_is_a_row_of_the_table() -> None:
    read, _ = scan(PACKAGE, set(SETTINGS))
    assert sorted(read - set(SETTINGS)) == []


def test_every_row_of_the_table_is_read_by_a_worker_component() -> None:
    read, _ = scan(PACKAGE, set(SETTINGS))
    assert sorted(set(SETTINGS) - read) == []


# -- the table itself ----------------------------------------------------------------------------


def test_each_setting_is_declared_once_and_each_also_row_names_one() -> None:
    declared = [row.name for rows in SECTIONS.values() for row in rows if not isinstance(row, Also)]
    assert len(declared) == len(set(declared))
    also = {row.name for rows in SECTIONS.values() for row in rows if isinstance(row, Also)}
    assert sorted(also - set(SETTINGS) - SCRAPY_SETTINGS) == []
    assert all(row.doc.strip() for rows in SECTIONS.values() for row in rows)


def test_an_unknown_name_is_one_line_and_a_default_is_a_copy() -> None:
    with pytest.raises(KeyError, match="POLITENESS_RATES is not a setting of"):
        default("POLITENESS_RATES")
    params = default("REDIS_PARAMS")
    params["socket_timeout"] = 99
    assert default("REDIS_PARAMS")["socket_timeout"] != 99


def test_the_components_unset_defaults_are_the_tables() -> None:
    # what a worker with no crawlfleet setting at all runs with: the rows' values
    empty = Settings()
    frontier = FrontierConfig.from_settings(empty, "book")
    assert frontier.prefetch == default("SCHEDULER_PREFETCH")
    assert frontier.seen_cache == default("SCHEDULER_SEEN_CACHE")
    assert frontier.lease_timeout == default("SCHEDULER_LEASE_TIMEOUT")
    assert frontier.idle_poll_max == default("SCHEDULER_IDLE_POLL_MAX")
    assert frontier.url_schemes == tuple(default("SCHEDULER_URL_SCHEMES"))
    assert frontier.queue_key == "book:requests"
    politeness = PolitenessConfig.from_settings(empty, "book")
    assert politeness == PolitenessConfig(namespace="book")
    assert politeness.limits.rate == default("POLITENESS_RATE")
    assert politeness.memory == default("POLITENESS_MEMORY")
    assert sorted(politeness.ban_statuses) == sorted(default("POLITENESS_BAN_STATUSES"))
    layout = layout_from_settings(empty, "book")
    assert layout.capacity == default("BLOOMFILTER_CAPACITY")
    assert layout.error_rate == default("BLOOMFILTER_ERROR_RATE")


@given(st.lists(st.from_regex(r"[A-Z][A-Z0-9_]{0,40}", fullmatch=True), max_size=20))
def test_any_names_give_at_most_one_line_each_naming_the_setting(names: list[str]) -> None:
    lines = unknown(names)
    assert len(lines) <= len(set(names))
    for line in lines:
        assert "\n" not in line
        assert line.split(" ", 1)[0] in names
        assert line.split(" ", 1)[0] not in SETTINGS

"""crawlfleet.hub.keys: the exact legacy key names, their settings, and that nobody else
spells a crawl's key (in Python or in the frontier's Lua)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings

from crawlfleet.frontier import scripts
from crawlfleet.frontier.bloomlayout import BloomConfigError, layout_from_settings
from crawlfleet.frontier.config import FrontierConfig, FrontierConfigError
from crawlfleet.frontier.rabbitmq import coord
from crawlfleet.hub.fleetkeys import JobKeys, pool_tag
from crawlfleet.hub.keydoc import KEYS
from crawlfleet.hub.keys import (
    BLOOMFILTER_KEY,
    DUPEFILTER_KEY,
    FRONTIER_GLOB,
    ITEMS_KEY,
    QUEUE_KEY,
    START_URLS_KEY,
    SpiderKeys,
    spider_of_frontier_key,
)

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "project" / "crawlfleet"
KEYS_MODULE = PACKAGE / "hub" / "keys.py"
# Python outside the package that talks to a crawl's Redis: the book's project, the scripts.
OTHER_SOURCES = (ROOT / "project" / "bookcrawler", ROOT / "scripts")
# Keys outside a crawl that happen to end like one of its keys: (file, suffix) -> why it stays.
NOT_A_CRAWL_KEY = {
    ("proxypool/store.py", "stats"): "the proxy pool's own <key>:stats counters",
}

W = "h:1:a"
# Deployed crawls read and write these names: they must never change.
LEGACY = [
    (SpiderKeys("book").requests, "book:requests"),
    (SpiderKeys("book").dupefilter, "book:dupefilter"),
    (SpiderKeys("book").start_urls, "book:start_urls"),
    (SpiderKeys("book").items, "book:items"),
    (SpiderKeys("book").bloomfilter, "book:bloomfilter"),
    (SpiderKeys("book").workers, "book:workers"),
    (SpiderKeys("book").leases(W), "book:leases:h:1:a"),
    (SpiderKeys("book").worker(W), "book:worker:h:1:a"),
    (SpiderKeys("book").stats, "book:stats"),
    (SpiderKeys("book").worker_stats(W), "book:stats:h:1:a"),
    (SpiderKeys("book").alive(W), "book:alive:h:1:a"),
    (SpiderKeys("book").seeding, "book:seeding"),
    (SpiderKeys("book").seeded, "book:seeded"),
    (SpiderKeys("book").paused, "book:paused"),
    (SpiderKeys("book").failed, "book:failed"),
    (SpiderKeys("book").deadletter, "book:deadletter"),
    (SpiderKeys("book").frontier, "book:frontier"),
    (SpiderKeys("book").seq, "book:seq"),
    (SpiderKeys("book").shard_count, "book:shards"),
    (SpiderKeys("book").total, "book:total"),
    (SpiderKeys("book").rabbitmq_workers, "book:rabbitmq:workers"),
    (SpiderKeys("book").rabbitmq_busy, "book:rabbitmq:busy"),
    (SpiderKeys("book").rabbitmq_outbox(W), "book:rabbitmq:outbox:h:1:a"),
    (SpiderKeys("book").ops_series(W), "book:ops:series:h:1:a"),
    (SpiderKeys("book").ops_scrapy(W), "book:ops:scrapy:h:1:a"),
    (SpiderKeys("book").ops_workers, "book:ops:workers"),
    (SpiderKeys("book").ops_queue, "book:ops:queue"),
    (SpiderKeys("book").politeness("a.example@p:1"), "book:politeness:key:a.example@p:1"),
    (SpiderKeys("book").politeness_index, "book:politeness:index"),
    (SpiderKeys("book").politeness_bans, "book:politeness:bans"),
    (SpiderKeys("book").politeness_history, "book:politeness:history"),
    (SpiderKeys("book").prefix, "book"),
    (SpiderKeys("a*b").glob, "a\\*b:*"),
]


@pytest.mark.parametrize(("built", "legacy"), LEGACY, ids=[name for _, name in LEGACY])
def test_keys_are_the_legacy_names(built: str, legacy: str) -> None:
    assert built == legacy


def test_every_key_is_documented_once() -> None:
    members = {
        name
        for name in vars(SpiderKeys)
        if not name.startswith("_")
        and name
        not in (
            *("spider", "tagged", "for_url", "for_client", "prefix", "glob"),
            "politeness_prefix",  # what the politeness keys start with, no key
            *("shard", "shards", "of_shards", "home"),  # a sharded crawl's shards
        )
    }
    documented = [doc.attribute for doc in KEYS]
    assert sorted(documented) == sorted(members)
    assert len(LEGACY) - 2 == len(members)  # the table above checks every one
    assert KEYS[0].pattern() == "<spider>:requests"
    assert {doc.pattern() for doc in KEYS} >= {"<spider>:leases:<worker>", "<spider>:ops:queue"}


def test_setting_defaults_name_the_same_keys() -> None:
    keys = SpiderKeys("book")
    for setting, key in [
        (QUEUE_KEY, keys.requests),
        (DUPEFILTER_KEY, keys.dupefilter),
        (START_URLS_KEY, keys.start_urls),
        (BLOOMFILTER_KEY, keys.bloomfilter),
        (ITEMS_KEY, keys.items),
    ]:
        assert setting.resolve(None, "book", ValueError) == key
        assert next(d for d in KEYS if d.setting is setting).pattern().startswith("<spider>:")


def test_scrapy_redis_settings_rename_keys_as_before() -> None:
    config = FrontierConfig.from_settings(
        Settings(
            {
                "SCHEDULER_QUEUE_KEY": "q:%(spider)s",
                "SCHEDULER_DUPEFILTER_KEY": "%(spider)s-fp",
                "REDIS_START_URLS_KEY": "seed:%(name)s",
            }
        ),
        "book",
    )
    assert (config.queue_key, config.dupefilter_key, config.start_urls_key) == (
        "q:book",
        "book-fp",
        "seed:book",
    )
    assert config.keys == SpiderKeys("book")
    plain = FrontierConfig.from_settings(Settings(), "book")
    assert (plain.queue_key, plain.dupefilter_key, plain.start_urls_key) == (
        "book:requests",
        "book:dupefilter",
        "book:start_urls",
    )
    assert layout_from_settings(Settings({"BLOOMFILTER_KEY": ""}), "book").key == "book:bloomfilter"


def test_bad_key_templates_are_one_line_naming_the_setting() -> None:
    with pytest.raises(FrontierConfigError) as excinfo:
        FrontierConfig.from_settings(Settings({"SCHEDULER_QUEUE_KEY": "%(nope)s"}), "book")
    assert str(excinfo.value) == (
        "SCHEDULER_QUEUE_KEY must be a key template like '%(spider)s:requests', "
        "got '%(nope)s' ('nope')"
    )
    with pytest.raises(FrontierConfigError, match=r"^REDIS_START_URLS_KEY must not be empty$"):
        FrontierConfig.from_settings(Settings({"REDIS_START_URLS_KEY": ""}), "book")
    with pytest.raises(BloomConfigError, match=r"^BLOOMFILTER_KEY must be a key template"):
        layout_from_settings(Settings({"BLOOMFILTER_KEY": "%(x)s"}), "book")
    with pytest.raises(ValueError, match=r"^--key must be a key template like '%"):
        ITEMS_KEY.resolve("%(spider)d", "book", ValueError, name="--key")


def test_spiders_are_found_by_their_frontier_hash() -> None:
    assert FRONTIER_GLOB == "*:frontier"
    assert spider_of_frontier_key(SpiderKeys("my:spider").frontier) == "my:spider"
    tagged = SpiderKeys("my:spider", tagged=True).frontier
    assert spider_of_frontier_key(tagged, tagged=True) == "my:spider"
    # on a cluster, a frontier hash without the tag (or with another) names no crawl
    assert spider_of_frontier_key("my:spider:frontier", tagged=True) == ""
    assert spider_of_frontier_key("{a}b:frontier", tagged=True) == ""
    assert spider_of_frontier_key("{a}{b}:frontier", tagged=True) == ""


def test_a_plain_client_names_every_key_as_documented() -> None:
    """Through a client of one Redis (or Sentinel's primary) nothing is tagged: the names are
    those of docs/reference/redis-keys.md (the cluster's are in tests/integration/cluster)."""
    client = redis.Redis(port=1)  # never connects
    assert SpiderKeys.for_client("book", client) == SpiderKeys("book")
    assert JobKeys.for_client(client) == JobKeys()
    assert JobKeys.for_client(client).job("7") == "crawlfleet:job:7"
    assert pool_tag("proxypool:proxies", client) == "proxypool:proxies"


# -- nobody else spells a key ------------------------------------------------------------------

SUFFIXES = sorted({doc.pattern().split(":")[1] for doc in KEYS})
_ALT = "|".join(SUFFIXES)
# ":requests" right after an f-string field or at the start of a concatenated string ...
SUFFIX_START = re.compile(rf":({_ALT})\b")
# ... or after a %-template, str.format field or glob: "%(spider)s:items", "{}:seq", "*:frontier".
TEMPLATE = re.compile(rf"(?:%\(\w+\)s|%s|\{{\w*\}}|\*):({_ALT})\b")


def key_spellings(source: str) -> Iterator[tuple[int, str]]:
    """(line, suffix) of every place ``source`` builds a crawl's key name from a string."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            for before, after in zip(node.values, node.values[1:], strict=False):
                if (
                    isinstance(before, ast.FormattedValue)
                    and isinstance(after, ast.Constant)
                    and (m := SUFFIX_START.match(str(after.value)))
                ):
                    yield node.lineno, m[1]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            right = node.right
            if (
                isinstance(right, ast.Constant)
                and isinstance(right.value, str)
                and (m := SUFFIX_START.match(right.value))
            ):
                yield node.lineno, m[1]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in TEMPLATE.finditer(node.value):
                yield node.lineno, m[1]
            yield from _embedded_spellings(node.value, node.lineno)


def _embedded_spellings(text: str, lineno: int) -> Iterator[tuple[int, str]]:
    """Spellings in a string holding a program run elsewhere (scripts/labcrawl.py's snippets)."""
    if "\n" not in text or "import " not in text:
        return
    try:
        spellings = list(key_spellings(text))
    except (SyntaxError, ValueError):  # prose
        return
    for line, suffix in spellings:
        yield lineno + line - 1, suffix


@pytest.mark.parametrize(
    "code",
    [
        'key = f"{spider}:requests"',
        'key = f"{self.prefix}:leases:{w}"',
        'key = f"{spider}~{j}:requests"',  # a shard's key (SpiderKeys(spider, …, shard, n))
        'key = spider + ":workers"',
        'key = "%(spider)s:items" % {"spider": s}',
        'key = "%s:seq" % spider',
        'key = "{}:paused".format(spider)',
        'found = client.scan_iter(match="*:frontier")',
        'CODE = """\nimport json\nbatch = client.xrange(SPIDER + ":items")\n"""',
    ],
)
def test_the_check_finds_a_spelled_key(code: str) -> None:
    assert list(key_spellings(code))


def test_the_check_leaves_prose_and_other_keys_alone() -> None:
    code = (
        '"""Keys: ``<spider>:requests``, ``SPIDER:failed``."""\n'
        'a = f"{key}:meta"\n'
        'b = f"{host}:{port}"\n'
        'c = "scheduler/requeued"\n'
        'd = f"accountpool:stats:{site}"\n'
        'e = """Runs:\n    import keys\n    ids = SPIDER + ":items" (prose, not a program)"""\n'
    )
    assert list(key_spellings(code)) == []


def test_no_module_but_keys_spells_a_crawl_key() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == KEYS_MODULE:
            continue
        rel = path.relative_to(PACKAGE).as_posix()
        for line, suffix in key_spellings(path.read_text()):
            if (rel, suffix) not in NOT_A_CRAWL_KEY:
                found.append(f"crawlfleet/{rel}:{line}: builds a '<spider>:{suffix}' key")
    assert found == [], "use crawlfleet.hub.keys.SpiderKeys:\n" + "\n".join(found)


def test_the_books_project_and_the_scripts_spell_no_crawl_key_either() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: builds a '<spider>:{suffix}' key"
        for root in OTHER_SOURCES
        for path in sorted(root.rglob("*.py"))
        for line, suffix in key_spellings(path.read_text())
    ]
    assert found == [], "use crawlfleet.hub.keys.SpiderKeys:\n" + "\n".join(found)


# -- the Lua side: every name in lua/keys.lua, evaluated in Redis -------------------------------

LUA = PACKAGE / "frontier" / "lua"
# `local FAILED = P .. ':failed'` mirrors SpiderKeys.failed; `local function leases_of(w) return
# P .. ':leases:' .. w end` mirrors SpiderKeys.leases(w).
LUA_KEY = re.compile(r"^local (\w+) = P \.\. '", re.M)
LUA_WORKER_KEY = re.compile(r"^local function (\w+)_of\(w\) return P \.\. '", re.M)


def lua_key_names() -> list[tuple[str, str]]:
    """(Lua expression, SpiderKeys attribute) of every name keys.lua defines."""
    text = (LUA / "keys.lua").read_text()
    names = [(name, name.lower()) for name in LUA_KEY.findall(text)]
    names += [(f"{attr}_of(W)", attr) for attr in LUA_WORKER_KEY.findall(text)]
    assert len(names) == text.count(" = P .. '") + text.count(") return P .. '")
    return names


@pytest.mark.parametrize("prelude", [scripts.PRELUDE, coord.PRELUDE], ids=["redis", "rabbitmq"])
def test_lua_key_names_are_the_spider_keys(prelude: str, redis_client: redis.Redis) -> None:
    names = lua_key_names()
    assert {attr for _, attr in names} <= {doc.attribute for doc in KEYS}
    assert {"leases", "worker", "worker_stats", "failed", "deadletter", "rabbitmq_busy"} <= {
        attr for _, attr in names
    }
    body = prelude + "\nreturn {" + ", ".join(expr for expr, _ in names) + "}"
    got = redis_client.eval(body, 3, "q", "s", "k", "my:spider", W, "60000", "0")
    keys = SpiderKeys("my:spider")
    expected = [
        getattr(keys, attr)(W) if expr.endswith("(W)") else getattr(keys, attr)
        for expr, attr in names
    ]
    assert [key.decode() for key in got] == expected


# Lua parts that derive names from another key, not from the crawl's prefix: (file, literal) -> why.
DERIVED_IN_LUA = {
    ("queue_keyed.lua", "':ready'"): "KeyedPriorityQueue's sub-keys of its queue key (QK)",
    ("queue_keyed.lua", "':site:'"): "KeyedPriorityQueue's sub-keys of its queue key (QK)",
    ("bloom_layers.lua", "':'"): "a scalable Bloom filter's layers <key>:1, <key>:2 … of its key",
}


def test_no_lua_part_but_keys_lua_spells_a_key() -> None:
    spelled = []
    for path in sorted(LUA.glob("*.lua")):
        if path.name != "keys.lua":
            text = path.read_text()
            found = re.findall(r"\bP \.\.|'(?::[^']*)'", text)
            spelled += [f"{path.name}: {m}" for m in found if (path.name, m) not in DERIVED_IN_LUA]
    assert spelled == [], "name the key in lua/keys.lua:\n" + "\n".join(spelled)
    assert scripts.PRELUDE.startswith(scripts.KEY_NAMES)
    assert coord.PRELUDE.startswith(scripts.KEY_NAMES)

"""crawlfleet.hub.acl: the rendered ACL lines (default off, hashed passwords, per-role rules) and
``crawlfleet acl render``'s input checks; tests/integration/acl tries them on a real server."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

from crawlfleet.cli import main
from crawlfleet.hub import acl

PASSWORDS = {role: f"{role}-password-0123456789" for role in acl.ROLES}


def test_default_is_off_and_passwords_are_hashed() -> None:
    text = acl.render(PASSWORDS, ["book"])
    lines = text.splitlines()
    assert lines[0].startswith("user default reset off")
    assert [line.split()[1] for line in lines[1:]] == list(acl.ROLES)
    for role, password in PASSWORDS.items():
        assert password not in text
        assert f"#{hashlib.sha256(password.encode()).hexdigest()}" in text


def test_the_crawler_and_dashboard_are_limited_to_the_spiders() -> None:
    crawler = acl.role_rules("crawler", ["book", "adv"])
    assert crawler.keys[:3] == ("~book:*", "~adv:*", "~crawlfleet:check:*")
    assert "-@dangerous" in crawler.commands
    dashboard = acl.role_rules("dashboard", ["book"])
    assert dashboard.keys[0] == "%R~book:*"
    assert [k for k in dashboard.keys if not k.startswith("%R~")] == [
        "~book:ops:queue",
        "~crawlfleet:alerts:state",
        "~crawlfleet:alerts:notified",
    ]
    assert "+@write" not in dashboard.commands


def test_the_agent_keys_and_the_dashboard_info() -> None:
    crawler = acl.role_rules("crawler", ["book"])
    assert crawler.keys[1:] == (
        "~crawlfleet:check:*",
        "~crawlfleet:agents",
        "~crawlfleet:agent:*",
        "~crawlfleet:job:*",
        "~crawlfleet:jobs",
        "~crawlfleet:jobs:active",
        "%W~crawlfleet:ack:*",
        "~book~*:*",  # the keys of a sharded crawl's shards 1, 2, … (SCHEDULER_SHARDS)
        "&book:alive:*",  # the workers' liveness channels (home shard, shards 1, 2, …) only
        "&book~*:alive:*",
    )
    assert "+pubsub|numsub" in crawler.commands and "+publish" not in crawler.commands
    assert acl.role_rules("crawler", ["book"], cluster=True).keys[-3] == "~{book~*}:*"
    assert "%R~book~*:*" in acl.role_rules("dashboard", ["book"]).keys
    # INFO is in @dangerous: Redis applies the rules in order, so +info must come after it
    commands = acl.role_rules("dashboard", ["book"]).commands
    assert commands.index("+info") > commands.index("-@dangerous")
    for role in acl.ROLES:
        rules = acl.role_rules(role, ["book"]).commands
        for never in ("+config", "+keys", "+flushall", "+flushdb", "+debug", "+@dangerous"):
            assert never not in rules


@pytest.mark.parametrize(
    ("passwords", "spiders", "needle"),
    [
        ({"crawler": PASSWORDS["crawler"]}, [], "at least one spider"),
        ({"crawler": "short"}, ["book"], "at least 16 characters"),
        ({"robot": PASSWORDS["crawler"]}, ["book"], "unknown role 'robot'"),
        ({"crawler": PASSWORDS["crawler"]}, ["bo ok"], "spider name 'bo ok'"),
    ],
)
def test_bad_input_is_one_line(passwords: dict[str, str], spiders: list[str], needle: str) -> None:
    with pytest.raises(acl.AclError, match=needle):
        acl.render(passwords, spiders)


def test_the_cli_writes_0600_and_reports_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "users.acl"
    argv = ["acl", "render", "--spider", "book", "-o", str(target)]
    for changed in (True, False):
        monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(PASSWORDS)))
        assert main(argv) == 0
        assert json.loads(capsys.readouterr().out)["changed"] is changed
    assert target.stat().st_mode & 0o777 == 0o600
    monkeypatch.setattr("sys.stdin", io.StringIO("not json"))
    assert main(argv) == 2
    assert "JSON object" in capsys.readouterr().err


HUB = {role: f"{role}-password-0123456789" for role in acl.HUB_ROLES}


def test_the_hubs_own_users_replicate_and_watch_only() -> None:
    lines = acl.render({**PASSWORDS, **HUB}, ["book"]).splitlines()
    assert [line.split()[1] for line in lines[1:]] == [*acl.ROLES, *acl.HUB_ROLES]
    replica = acl.role_rules("replica", ["book"])
    assert replica.keys == () and replica.commands == ("-@all", "+psync", "+replconf", "+ping")
    sentinel = acl.role_rules("sentinel", ["book"])
    assert sentinel.keys == ("&__sentinel__:*",)  # no key at all, its hello channel only
    assert {"+slaveof", "+replicaof", "+config|rewrite", "+client|kill"} <= set(sentinel.commands)
    assert not any(c.startswith(("+@", "~")) for c in (*replica.commands, *sentinel.commands))


def test_the_sentinels_file_lets_the_services_only_find_the_primary() -> None:
    text = acl.render_sentinel(HUB["sentinel"], {**PASSWORDS, **HUB})
    lines = text.splitlines()
    digest = hashlib.sha256(HUB["sentinel"].encode()).hexdigest()
    assert lines[0] == f"user default reset on #{digest} resetchannels ~* &* +@all"
    assert [line.split()[1] for line in lines[1:]] == list(acl.ROLES)  # no hub role
    for line in lines[1:]:
        rules = line.split()[6:]
        assert rules == list(acl.SENTINEL_DISCOVERY)
        assert not any(r in rules for r in ("+sentinel|failover", "+sentinel|set", "+@all"))
    for password in [*PASSWORDS.values(), *HUB.values()]:
        assert password not in text
    with pytest.raises(acl.AclError, match="Sentinels' password must be at least 16"):
        acl.render_sentinel("short", PASSWORDS)


def test_the_cli_renders_the_sentinels_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({**PASSWORDS, **HUB})))
    assert main(["acl", "render", "--sentinel"]) == 0
    assert capsys.readouterr().out == acl.render_sentinel(HUB["sentinel"], PASSWORDS)
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(PASSWORDS)))
    assert main(["acl", "render", "--sentinel"]) == 2
    err = capsys.readouterr().err
    assert "needs the sentinel role's password" in err and len(err.strip().splitlines()) == 1


def test_a_cluster_s_crawler_uses_the_tagged_keys_and_finds_the_slots(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    crawler = acl.role_rules("crawler", ["book"], cluster=True)
    assert crawler.keys[0] == "~{book}:*" and "~book:*" not in crawler.keys
    assert crawler.keys[-2:] == ("&{book}:alive:*", "&{book~*}:alive:*")
    assert "+ssubscribe" in crawler.commands
    assert set(acl.CLUSTER_DISCOVERY) <= set(crawler.commands)
    assert not any(c in crawler.commands for c in ("+cluster", "+cluster|addslots", "+@all"))
    admin = acl.role_rules("cluster", ["book"], cluster=True)
    assert admin.keys == () and {"+cluster", "+info"} <= set(admin.commands)
    assert not any(c.startswith(("+@", "~")) for c in admin.commands)  # no data, no category
    # The single hub's file does not change with the cluster's users beside it.
    assert acl.role_rules("crawler", ["book"]).keys[0] == "~book:*"
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({**PASSWORDS, **HUB})))
    assert main(["acl", "render", "--cluster", "--spider", "book"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines[1:]] == [*acl.ROLES, *acl.HUB_ROLES]
    assert "~{book}:*" in lines[1].split() and "+cluster|slots" in lines[1].split()

"""Site configuration: the built-in demosite adapter, files, overrides and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawlfleet.accountpool.sites import (
    DEFAULT_SITES,
    SiteConfigError,
    load_sites,
    parse_site_urls,
    parse_sites,
)


def test_builtin_demosite_and_url_override() -> None:
    sites = load_sites(None, {})
    assert list(sites) == ["demosite"]
    assert sites["demosite"].base_url == "http://127.0.0.1:8000"
    moved = load_sites(None, {"demosite": "http://127.0.0.2:9000/"})
    assert moved["demosite"].base_url == "http://127.0.0.2:9000"
    assert DEFAULT_SITES["demosite"]["base_url"] == "http://127.0.0.1:8000"  # not mutated


def test_yaml_and_json_files(tmp_path: Path) -> None:
    yaml_file = tmp_path / "sites.yaml"
    yaml_file.write_text(
        "sites:\n  shop:\n    base_url: https://shop.example\n"
        "    login: {url: /login, token_path: token}\n    check: {url: /me}\n"
    )
    json_file = tmp_path / "sites.json"
    json_file.write_text(json.dumps({"sites": DEFAULT_SITES}))
    assert load_sites(str(yaml_file), {})["shop"].options["check"] == {"url": "/me"}
    assert list(load_sites(str(json_file), {})) == ["demosite"]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([], "'sites' mapping"),
        ({"sites": {}}, "no sites"),
        ({"sites": {"bad name": {"base_url": "http://x"}}}, "site name"),
        ({"sites": {"health": {"base_url": "http://x"}}}, "site name"),
        ({"sites": {"s": "http://x"}}, "sites.s: expected a mapping"),
        ({"sites": {"s": {}}}, "sites.s.base_url"),
        ({"sites": {"s": {"base_url": "ftp://x"}}}, "sites.s.base_url"),
        ({"sites": {"s": {"base_url": "http://"}}}, "no host"),
        ({"sites": {"s": {"base_url": "http://x", "adapter": ""}}}, "sites.s.adapter"),
    ],
)
def test_bad_documents(data: object, fragment: str) -> None:
    with pytest.raises(SiteConfigError, match="sites") as info:
        parse_sites(data)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_files_and_overrides(tmp_path: Path) -> None:
    with pytest.raises(SiteConfigError, match="cannot read sites file"):
        load_sites(str(tmp_path / "missing.yaml"), {})
    broken = tmp_path / "broken.yaml"
    broken.write_text("sites:\n  a: {base_url: [\n")
    with pytest.raises(SiteConfigError, match=r"not valid YAML/JSON at line \d"):
        load_sites(str(broken), {})
    with pytest.raises(SiteConfigError, match=r"unknown site 'nope' \(known: demosite\)"):
        load_sites(None, {"nope": "http://127.0.0.1:1"})
    with pytest.raises(SiteConfigError, match="--site-url demosite"):
        load_sites(None, {"demosite": "not a url"})


def test_parse_site_urls() -> None:
    assert parse_site_urls("a=http://x:1, b=http://y") == {"a": "http://x:1", "b": "http://y"}
    assert parse_site_urls("") == {}
    with pytest.raises(SiteConfigError, match="NAME=URL"):
        parse_site_urls("http://x")

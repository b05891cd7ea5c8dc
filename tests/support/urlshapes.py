"""Hypothesis strategies for the multi-node Redis URL forms (Sentinel, Cluster), and the one
check every refused shape must pass: one line, naming REDIS_URL, the password nowhere."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import strategies as st

from crawlfleet.hub.errors import RedisUrlError
from crawlfleet.hub.urls import mask_url, validate_url

SECRET = "Zq9-s3cret"

password = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=12)
host = st.one_of(
    st.sampled_from(["h1", "10.0.0.1", "[::1]", "", "[::1", "h:1:2", "hub.example"]),
    st.text(max_size=8),
)
port = st.one_of(st.integers(-5, 70000).map(str), st.text(max_size=5), st.just(""))
hosts = st.lists(st.tuples(host, port), min_size=0, max_size=3)


def paths(*examples: str) -> st.SearchStrategy[str]:
    """The URL form's own path shapes, and any other."""
    return st.one_of(st.sampled_from(examples), st.text(max_size=12).map(lambda t: "/" + t))


def queries(*examples: str) -> st.SearchStrategy[str]:
    return st.one_of(
        st.just(""), st.sampled_from(examples), st.text(max_size=10).map(lambda t: "?" + t)
    )


def url(scheme: str, secret: str, raw: bool, nodes: list[tuple[str, str]], rest: str) -> str:
    """``scheme://:<password>@h:p,h:p<rest>``, the password written raw or percent-encoded."""
    written = secret if raw else quote(secret, safe="")
    netloc = ",".join(f"{h}:{p}" if p else h for h, p in nodes)
    return f"{scheme}://:{written}@{netloc}{rest}"


def assert_refused_in_one_line(url: str) -> None:
    with pytest.raises(RedisUrlError) as info:
        validate_url(url)
    message = str(info.value)
    assert "\n" not in message and "\r" not in message
    assert SECRET not in message and "REDIS_URL" in message
    assert SECRET not in mask_url(url)

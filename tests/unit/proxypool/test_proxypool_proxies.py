"""Proxy address parsing, masking and rendering; IP extraction used by the anonymity check."""

from __future__ import annotations

import pytest

from crawlfleet.proxypool.proxies import ProxyFormatError, mask_proxy, parse_proxy, render_proxy
from crawlfleet.proxypool.tester import addresses_in


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("1.2.3.4:8080", "http://1.2.3.4:8080"),
        ("  1.2.3.4:8080\n", "http://1.2.3.4:8080"),
        ("HTTP://1.2.3.4:8080", "http://1.2.3.4:8080"),
        ("http://1.2.3.4:8080/", "http://1.2.3.4:8080"),
        ("https://Proxy.Example.net:3128", "https://proxy.example.net:3128"),
        ("http://user:s3cret@10.0.0.1:3128", "http://user:s3cret@10.0.0.1:3128"),
        ("[::1]:8080", "http://[::1]:8080"),
        ("http://[2001:db8:0::1]:80", "http://[2001:db8::1]:80"),
        ("localhost:1", "http://localhost:1"),
    ],
)
def test_parse_proxy_normalises(text: str, stored: str) -> None:
    assert parse_proxy(text) == stored


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("garbage", "port"),
        ("1.2.3.4", "port"),
        ("1.2.3.4:0", "port"),
        ("1.2.3.4:65536", "not a proxy"),
        ("1.2.3.4:80x", "not a proxy"),
        ("999.1.1.1:80", "bad host"),
        ("1.2.3:80", "bad host"),
        ("bad_host!:80", "bad host"),
        ("socks5://1.2.3.4:1080", "unsupported proxy scheme"),
        ("ftp://1.2.3.4:21", "unsupported proxy scheme"),
        ("http://1.2.3.4:80/path", "no path"),
        ("http://1.2.3.4:80?x=1", "no path"),
        ("1.2.3.4:80 extra", "whitespace"),
        ("<html><body>", "port"),
        (":8080", "needs a host"),
        ("http://:pw@1.2.3.4:80", "empty user"),
        ("[zz::1]:80", "IPv6"),
    ],
)
def test_parse_proxy_rejects_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(ProxyFormatError, match=reason) as info:
        parse_proxy(text)
    assert "\n" not in str(info.value)


def test_mask_hides_the_password_only() -> None:
    assert mask_proxy("http://user:s3cret@10.0.0.1:3128") == "http://user:***@10.0.0.1:3128"
    assert mask_proxy("http://10.0.0.1:3128") == "http://10.0.0.1:3128"


def test_render_gives_host_port_for_plain_http_only() -> None:
    assert render_proxy("http://1.2.3.4:80") == "1.2.3.4:80"
    assert render_proxy("http://1.2.3.4:80", "url") == "http://1.2.3.4:80"
    assert render_proxy("https://1.2.3.4:443") == "https://1.2.3.4:443"
    assert render_proxy("http://u:p@1.2.3.4:80") == "http://u:p@1.2.3.4:80"


def test_addresses_in_compares_whole_addresses() -> None:
    assert addresses_in('{"origin": "127.0.0.10"}') == {"127.0.0.10"}
    assert "127.0.0.1" not in addresses_in("origin: 127.0.0.10")
    assert addresses_in("x-forwarded-for: 10.0.0.1, ::1\norigin: 300.1.1.1") == {"10.0.0.1", "::1"}
    assert addresses_in("no address here: 12:30") == set()

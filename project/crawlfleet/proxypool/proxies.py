"""Proxy addresses: parse a source line into the stored form, mask it for logs, render it.

The store keeps every proxy as ``scheme://[user:password@]host:port`` (scheme ``http`` or
``https``, host lower-cased, IPv6 in brackets) so that ``1.2.3.4:80`` and ``HTTP://1.2.3.4:80``
are one member. Clients get ``host:port`` for a plain HTTP proxy without credentials (what the
book's clients expect) and the full URL otherwise.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

SCHEMES = ("http", "https")
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


class ProxyFormatError(ValueError):
    """A string that is not a proxy address; the message says why in one line."""


def _host(raw: str) -> str:
    host = raw.lower()
    if host.startswith("[") and host.endswith("]"):
        try:
            return f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"
        except ValueError:
            raise ProxyFormatError(f"bad IPv6 address {raw!r}") from None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if re.fullmatch(r"[0-9.]+", host) or not _HOSTNAME.match(host):
            raise ProxyFormatError(f"bad host {raw!r}") from None
        return host
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def parse_proxy(text: str) -> str:
    """Return the stored form of ``text`` (``host:port`` or ``scheme://[user:pass@]host:port``)."""
    line = text.strip()
    if not line:
        raise ProxyFormatError("empty proxy address")
    if any(c.isspace() for c in line):
        raise ProxyFormatError("whitespace inside a proxy address")
    url = line if "://" in line else f"http://{line}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ProxyFormatError(f"not a proxy address: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ProxyFormatError(f"unsupported proxy scheme {parts.scheme!r} (use http or https)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ProxyFormatError("a proxy address has no path, query or fragment")
    if port is None or port == 0:
        raise ProxyFormatError("a proxy address needs a port between 1 and 65535")
    netloc = parts.netloc
    userinfo, _, hostport = netloc.rpartition("@")
    raw_host = hostport.rsplit(":", 1)[0]
    if not raw_host:
        raise ProxyFormatError("a proxy address needs a host")
    host = _host(raw_host)
    if userinfo and not parts.username:
        raise ProxyFormatError("empty user name in proxy credentials")
    prefix = f"{userinfo}@" if userinfo else ""
    return f"{scheme}://{prefix}{host}:{port}"


def mask_proxy(proxy: str) -> str:
    """The stored form with any password replaced by ``***`` (for logs)."""
    scheme, sep, rest = proxy.partition("://")
    userinfo, at, hostport = rest.rpartition("@")
    if not sep or not at:
        return proxy
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:***@{hostport}"


def render_proxy(proxy: str, fmt: str = "auto") -> str:
    """What a client gets: ``host:port`` for plain HTTP without credentials in ``auto`` format."""
    if fmt == "auto" and proxy.startswith("http://") and "@" not in proxy:
        return proxy[len("http://") :]
    return proxy

"""Where a webhook may be sent: an SSRF guard.

A deployed stack sends only to `https` URLs whose host resolves to public addresses: never loopback, private,
shared (100.64/10), link-local (the instance metadata service, 169.254.169.254, is one), multicast, reserved or
unspecified addresses, nor an IPv6 form of one (fd00:ec2::254 is private). The check runs when an endpoint is
registered and again before every attempt, which then connects to the very address it checked (pinned), so a name
that resolves elsewhere the second time (DNS rebinding) reaches nothing it was not allowed to. The local runtime
allows loopback and plain `http` (a setting), so a receiver on 127.0.0.1 gets the same deliveries.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_URL_CHARS = 2048
# What a webhook URL may look like (the OpenAPI document states it; `parse` enforces it): a host name or an IPv4
# address, an optional port, an optional path and query of printable ASCII; no user info, no fragment.
URL_PATTERN = re.compile(r'^https?://[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(:[0-9]{1,5})?(/[!"$-~]*)?$')
Resolver = Callable[[str, int], list[str]]  # (host, port) -> its addresses


class DestinationRefused(ValueError):
    """A URL a webhook may not be sent to; the message says why, in one line."""


@dataclass(frozen=True)
class Destination:
    url: str
    scheme: str
    host: str
    port: int
    target: str  # path and query, as sent in the request line

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port == default else f"{name}:{self.port}"


def system_resolver(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise DestinationRefused(f"{host} does not resolve ({exc})") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def parse(url: str, allow_loopback: bool = False) -> Destination:
    """A webhook URL's parts, or DestinationRefused. Only https (and http where loopback is allowed), no user
    info, no fragment."""
    if len(url) > MAX_URL_CHARS:
        raise DestinationRefused(f"a webhook URL is at most {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise DestinationRefused(f"not a URL: {exc}") from None
    schemes = ("https", "http") if allow_loopback else ("https",)
    if parts.scheme not in schemes:
        raise DestinationRefused(f"a webhook URL starts with {' or '.join(s + '://' for s in schemes)}")
    if not parts.hostname:
        raise DestinationRefused("a webhook URL names a host")
    if parts.username is not None or parts.password is not None:
        raise DestinationRefused("a webhook URL carries no user or password (sitedispatch signs each delivery)")
    if parts.fragment:
        raise DestinationRefused("a webhook URL has no fragment")
    if URL_PATTERN.fullmatch(url) is None:
        raise DestinationRefused(
            "a webhook URL is SCHEME://HOST[:PORT][/PATH[?QUERY]]: a host name or an IPv4 address, then printable "
            "ASCII without spaces"
        )
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    default = 443 if parts.scheme == "https" else 80
    return Destination(url, parts.scheme, parts.hostname.lower(), port or default, target)


def refusal(address: str, allow_loopback: bool) -> str | None:
    """Why `address` may not be sent to, or None."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return None if allow_loopback else "a loopback address"
    if ip.is_global and not ip.is_multicast:
        return None
    for name, test in (
        ("an unspecified address", ip.is_unspecified),
        ("a link-local address (the metadata service is one)", ip.is_link_local),
        ("a multicast address", ip.is_multicast),
        ("a private address", ip.is_private),
    ):
        if test:
            return name
    return "an address that is not public"


def checked_address(destination: Destination, allow_loopback: bool, resolve: Resolver = system_resolver) -> str:
    """The address to connect to: the host's first address, once every address it resolves to is allowed."""
    addresses = resolve(destination.host, destination.port)
    if not addresses:
        raise DestinationRefused(f"{destination.host} does not resolve")
    for address in addresses:
        why = refusal(address, allow_loopback)
        if why is not None:
            raise DestinationRefused(f"{destination.host} resolves to {address}, {why}: webhooks go to public hosts")
    return addresses[0]

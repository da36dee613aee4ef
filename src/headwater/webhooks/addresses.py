"""Where a webhook may be sent (contract section 13): `https` only unless
HEADWATER_WEBHOOK_ALLOW_HTTP, and never to a host that is, or resolves to, a loopback,
private, link-local, multicast, unspecified or otherwise non-public address unless
HEADWATER_WEBHOOK_ALLOW_PRIVATE. The name is resolved again at every delivery, and
the delivery's connections resolve through a resolver that checks every answer
(`webhooks.sender.CheckedResolver`), so a DNS answer that changes between the check
and the connection (rebinding) cannot point it elsewhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass

from yarl import URL

MAX_URL_LENGTH = 2048
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(Exception):
    """A URL or address a webhook may not go to; the message says why."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a URL connects: its host (a name or a literal address) and port."""

    host: str
    port: int


def parse(url: str, *, allow_http: bool) -> Target:
    """The URL's parts, or Refused: its syntax, scheme and credentials."""
    if len(url) > MAX_URL_LENGTH:
        raise Refused(f"the URL is longer than {MAX_URL_LENGTH} characters")
    try:
        # yarl: the parser aiohttp reads the URL with when it delivers
        parsed = URL(url)
    except (TypeError, ValueError) as exc:
        raise Refused(f"not a URL: {exc}") from None
    schemes = ("https", "http") if allow_http else ("https",)
    if parsed.scheme not in schemes:
        raise Refused(
            "the scheme must be https"
            + ("" if allow_http else " (http needs HEADWATER_WEBHOOK_ALLOW_HTTP=true)")
        )
    if not parsed.host:
        raise Refused("the URL has no host")
    if parsed.user is not None or parsed.password is not None:
        raise Refused("the URL may not hold a user name or password; verify the signature")
    if parsed.fragment:
        raise Refused("the URL may not have a fragment")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return Target(host=parsed.host.strip("[]"), port=port)


def refusal(address: IPAddress) -> str | None:
    """Why an address is no place for a webhook; None for a public one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    for reason, test in (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
    ):
        if test:
            return reason
    if not address.is_global:
        return "not public"
    return None


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _checked(host: str, addresses: list[str], *, allow_private: bool) -> list[str]:
    if not addresses:
        raise Refused(f"{host} does not resolve")
    if not allow_private:
        for text in addresses:
            reason = refusal(ipaddress.ip_address(text.split("%", 1)[0]))
            if reason:
                raise Refused(f"{host} resolves to a {reason} address ({text})")
    return addresses


def _unique(infos: list[tuple[object, ...]]) -> list[str]:
    seen: dict[str, None] = {}
    for info in infos:
        sockaddr = info[4]
        assert isinstance(sockaddr, tuple)
        seen[str(sockaddr[0])] = None
    return list(seen)


def check(target: Target, *, allow_private: bool) -> list[str]:
    """The host's addresses, each allowed (blocking: at create and update)."""
    literal = _literal(target.host)
    if literal is not None:
        return _checked(target.host, [str(literal)], allow_private=allow_private)
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Refused(f"{target.host} does not resolve ({exc})") from None
    return _checked(target.host, _unique(list(infos)), allow_private=allow_private)


async def resolve(target: Target, *, allow_private: bool) -> list[str]:
    """As `check`, on the event loop (at each delivery)."""
    literal = _literal(target.host)
    if literal is not None:
        return _checked(target.host, [str(literal)], allow_private=allow_private)
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Refused(f"{target.host} does not resolve ({exc})") from None
    return _checked(target.host, _unique(list(infos)), allow_private=allow_private)

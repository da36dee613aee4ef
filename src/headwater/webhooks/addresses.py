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
import functools
import ipaddress
import re
import socket
from dataclasses import dataclass

import idna
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


# A URL's parts and an address's verdict depend on nothing else: kept for the next
# delivery (parsing both anew cost each delivery 8 us, 4% of the delivery loop's time)
CACHED = 4096


@functools.lru_cache(maxsize=CACHED)
def parse(url: str, *, allow_http: bool) -> Target:
    """The URL's parts, or Refused: its syntax, scheme and credentials."""
    if len(url) > MAX_URL_LENGTH:
        raise Refused(f"the URL is longer than {MAX_URL_LENGTH} characters")
    try:
        # yarl: the parser aiohttp reads the URL with when it delivers; its parts are
        # decoded lazily, so each is read here, where an IDNA error is still a refusal
        parsed = URL(url)
        host, port, scheme = parsed.host, parsed.port, parsed.scheme
        user, password, fragment = parsed.user, parsed.password, parsed.fragment
    except (TypeError, ValueError) as exc:  # IDNAError and UnicodeError are ValueErrors
        raise Refused(f"not a URL: {exc}") from None
    schemes = ("https", "http") if allow_http else ("https",)
    if scheme not in schemes:
        raise Refused(
            "the scheme must be https"
            + ("" if allow_http else " (http needs HEADWATER_WEBHOOK_ALLOW_HTTP=true)")
        )
    if not host:
        raise Refused("the URL has no host")
    if user is not None or password is not None:
        raise Refused("the URL may not hold a user name or password; verify the signature")
    if fragment:
        raise Refused("the URL may not have a fragment")
    host = host.strip("[]")
    if _literal(host) is None:
        _valid_name(host)
    return Target(host=host, port=port or (443 if scheme == "https" else 80))


def _valid_name(host: str) -> None:
    """A host name as DNS takes it (IDNA 2008, labels of letters, digits and hyphens):
    a name no resolver could look up is refused here, not at the first delivery."""
    try:
        ascii_name = idna.encode(host.rstrip("."), uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError) as exc:
        raise Refused(f"the host is not a valid name ({exc})") from None
    if len(ascii_name) > 253 or not all(_LABEL.fullmatch(p) for p in ascii_name.split(".")):
        raise Refused("the host is not a valid name")


_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_COMPATIBLE = ipaddress.ip_network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (IPv4-mapped, IPv4-compatible, NAT64,
    6to4, Teredo's client), which is where a connection to it ends up."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if any(address in network for network in _NAT64):
        return low
    if address in _COMPATIBLE and int(address) > 1:  # not :: nor ::1, judged as they are
        return low
    return None


def refusal(address: IPAddress) -> str | None:
    """Why an address is no place for a webhook; None for a public one."""
    if isinstance(address, ipaddress.IPv6Address):
        address = embedded_ipv4(address) or address
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


@functools.lru_cache(maxsize=CACHED)
def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


@functools.lru_cache(maxsize=CACHED)
def _refusal_of(text: str) -> str | None:
    """`refusal` of an address as a resolver writes it (an IPv6 zone after `%`)."""
    return refusal(ipaddress.ip_address(text.split("%", 1)[0]))


def _checked(host: str, addresses: list[str], *, allow_private: bool) -> list[str]:
    if not addresses:
        raise Refused(f"{host} does not resolve")
    if not allow_private:
        for text in addresses:
            reason = _refusal_of(text)
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

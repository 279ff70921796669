"""The outbound-request guard: webhooks may not reach this machine or the cloud's metadata
service (server-side request forgery), unless the ``notify_allow_hosts`` setting says so.

Refused: loopback (127/8, ::1), link-local (169.254/16, fe80::/10, which holds the AWS/GCP/
Azure metadata address 169.254.169.254), the AWS IPv6 metadata address fd00:ec2::254, the
``metadata.google.internal`` name, unspecified (0.0.0.0, ::) and multicast addresses; an
IPv4-mapped IPv6 address is judged as its IPv4 address. Private ranges (10/8, 192.168/16 …)
are allowed: self-hosted chat servers live there.

The check resolves the host and returns the address it approved; the worker connects to that
address (with the original ``Host`` header and TLS server name), so a DNS answer that changes
between check and connect (DNS rebinding) cannot redirect the request.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "metadata.goog"})
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)


class BlockedDestination(Exception):
    """The URL may not be requested; the message says why without the URL's path."""


class Unresolvable(BlockedDestination):
    """The host name does not resolve now (DNS down or the name is wrong): worth retrying."""


@dataclass(frozen=True)
class Target:
    """An approved destination: ``address`` to connect to, ``host`` the TLS server name,
    ``host_header`` the ``Host`` header (host[:port]), ``pinned_url`` the URL with the host
    replaced by the address."""

    host: str
    address: str
    pinned_url: str
    host_header: str


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` is refused (``"loopback"``, ``"link-local"``, ``"cloud metadata"``,
    ``"unspecified"``, ``"multicast"``), or ``None`` when it is allowed."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA_ADDRESSES:
        return "cloud metadata"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    return None


def is_allowed(host: str, address: IPAddress, allow: Sequence[str]) -> bool:
    """Whether the allow-list names ``host`` (case-insensitive) or a network holding
    ``address``."""
    for entry in allow:
        if entry.lower() == host.lower():
            return True
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise Unresolvable(f"cannot resolve host {host}: {exc.strerror}") from None
    seen: list[IPAddress] = []
    for info in infos:
        addr = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if addr not in seen:
            seen.append(addr)
    return seen


def check_url(url: str, *, allow: Sequence[str] = ()) -> Target:
    """Resolve ``url``'s host and approve one address.

    Every address the name resolves to must be allowed (an attacker's name could list a good
    address and a bad one); the first is used.

    Raises:
        BlockedDestination: not http(s), no host, or refused and not allow-listed.
        Unresolvable: the name does not resolve (a BlockedDestination too).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise BlockedDestination("only http and https URLs can be notified")
    host = (parts.hostname or "").lower()
    if not host:
        raise BlockedDestination("the URL has no host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host_allowed = any(entry.lower() == host for entry in allow)
    if host in METADATA_HOSTS and not host_allowed:
        raise BlockedDestination(f"host {host} is a cloud metadata service")
    addresses = _resolve(host, port)
    if not addresses:
        raise BlockedDestination(f"host {host} has no address")
    for address in addresses:
        why = refusal(address)
        if why and not (host_allowed or is_allowed(host, address, allow)):
            raise BlockedDestination(
                f"host {host} resolves to {address}, a {why} address "
                "(allow it with the notify_allow_hosts setting)"
            )
    chosen = addresses[0]
    literal = f"[{chosen}]" if chosen.version == 6 else str(chosen)
    netloc = literal + (f":{parts.port}" if parts.port else "")
    pinned = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    bracketed = f"[{host}]" if ":" in host else host
    host_header = bracketed + (f":{parts.port}" if parts.port else "")
    return Target(host=host, address=str(chosen), pinned_url=pinned, host_header=host_header)

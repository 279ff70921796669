"""The outbound-request guard: webhooks may not reach this machine or the cloud's metadata
service (server-side request forgery), unless the ``notify_allow_hosts`` setting says so.

Refused: loopback (127/8, ::1), link-local (169.254/16, fe80::/10, which holds the AWS/GCP/
Azure metadata address 169.254.169.254), the AWS IPv6 metadata address fd00:ec2::254, the
``metadata.google.internal`` name, unspecified (0.0.0.0, ::) and multicast addresses. An IPv6
address that carries an IPv4 address is judged as that IPv4 address too: IPv4-mapped
(``::ffff:a.b.c.d``), IPv4-compatible (``::a.b.c.d``, RFC 4291 §2.5.5.1), NAT64 well-known
prefix (``64:ff9b::/96``, RFC 6052), 6to4 (``2002::/16``, RFC 3056) and Teredo (``2001::/32``).
Private ranges (10/8, 192.168/16 …) are allowed: self-hosted chat servers live there.

The check resolves the host and returns the address it approved; the worker connects to that
address (with the original ``Host`` header and TLS server name), so a DNS answer that changes
between check and connect (DNS rebinding) cannot redirect the request.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit, urlunsplit

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


NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")


class BadURL(BlockedDestination):
    """The URL does not parse (bad port, unbalanced ``[``) or carries parts we refuse
    (``user:password@``, control characters)."""


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64 ``64:ff9b::/96``,
    6to4, Teredo client), or ``None``."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    value = int(address)
    if value >> 32 == 0 and value > 1:  # ::a.b.c.d; :: and ::1 are judged as IPv6
        return ipaddress.IPv4Address(value)
    if address in NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` is refused (``"loopback"``, ``"link-local"``, ``"cloud metadata"``,
    ``"unspecified"``, ``"multicast"``), or ``None`` when it is allowed. An IPv6 address that
    embeds an IPv4 address (:func:`embedded_ipv4`) is refused when either is."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        why = refusal(inner) if inner is not None else None
        if why:
            return why
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


def url_syntax(url: str) -> SplitResult:
    """Split ``url``, refusing what no webhook URL may hold.

    Raises:
        BadURL: control characters or spaces, ``user:password@``, a port that is not a number
            in 1..65535, or a bracket without its pair.
    """
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise BadURL("the URL may not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BadURL(f"the URL does not parse ({_plain(exc)})") from None
    if "@" in parts.netloc:
        raise BadURL(
            "user:password@ in the URL is not supported; put credentials in the secret field"
        )
    if port == 0:
        raise BadURL("the URL does not parse (the port must be a number in 1..65535)")
    return parts


def parse_url(url: str) -> tuple[SplitResult, str, int | None]:
    """:func:`url_syntax`, then ``(parts, host, port)`` (host lower-case, port ``None`` when
    absent).

    Raises:
        BadURL: see :func:`url_syntax`; not http(s); no host.
    """
    parts = url_syntax(url)
    if parts.scheme not in ("http", "https"):
        raise BadURL("only http and https URLs can be notified")
    host = (parts.hostname or "").lower()
    if not host:
        raise BadURL("the URL has no host")
    return parts, host, parts.port


def _plain(exc: ValueError) -> str:
    text = str(exc)
    if "Port" in text or "port" in text:
        return "the port must be a number in 1..65535"
    if "IPv6" in text:
        return "an IPv6 address needs both [ and ]"
    return "malformed"


def check_url(url: str, *, allow: Sequence[str] = ()) -> Target:
    """Resolve ``url``'s host and approve one address.

    Every address the name resolves to must be allowed (an attacker's name could list a good
    address and a bad one); the first is used.

    Raises:
        BadURL: see :func:`parse_url` (a BlockedDestination too).
        BlockedDestination: refused and not allow-listed.
        Unresolvable: the name does not resolve (a BlockedDestination too).
    """
    parts, host, given_port = parse_url(url)
    port = given_port or (443 if parts.scheme == "https" else 80)
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

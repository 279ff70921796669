"""Parsers of the text that ``ibstat`` and ``ibstatus`` (rdma-core / infiniband-diags) print —
what an SRE pastes into a ticket, and a fallback where sysfs is not visible.

``ibstat``::

    CA 'mlx5_0'
        CA type: MT4129
        Port 1:
            State: Active
            Physical state: LinkUp
            Rate: 400
            Link layer: InfiniBand

``ibstatus``::

    Infiniband device 'mlx5_0' port 1 status:
        state:           4: ACTIVE
        phys state:      5: LinkUp
        rate:            200 Gb/sec (4X HDR)
        link_layer:      InfiniBand

Both give :class:`IbToolPort` with ``state`` in sysfs' words (``ibstat``'s ``Active`` →
``ACTIVE``, ``Initializing`` → ``INIT``) so either fits the ``nic_ports`` section. Lines that are
neither (an ``ibpanic:`` message, a prompt) are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.host.infiniband import rate_gbps, state_word

#: ``ibstat``'s port state words → sysfs' (drivers/infiniband/core/sysfs.c ``state_show``).
_IBSTAT_STATES = {
    "Down": "DOWN",
    "Initializing": "INIT",
    "Armed": "ARMED",
    "Active": "ACTIVE",
    "ActDefer": "ACTIVE_DEFER",
}
_IBSTAT_CA = re.compile(r"^CA '([^']+)'")
# A port number is an IBA port: ASCII digits, 0-255 (thousands of digits made int() raise).
_IBSTAT_PORT = re.compile(r"^\s+Port ([0-9]{1,3}):\s*$")
_IBSTATUS_PORT = re.compile(r"^Infiniband device '([^']+)' port ([0-9]{1,3}) status:")


@dataclass
class IbToolPort:
    """One port of ``ibstat``/``ibstatus`` output; ``ca_type`` only from ``ibstat``."""

    ca: str
    port: int
    state: str | None = None
    phys_state: str | None = None
    rate_gbps: float | None = None
    link_layer: str | None = None
    ca_type: str | None = None


def _key_value(line: str) -> tuple[str, str]:
    key, _, value = line.strip().partition(":")
    return key.strip().lower(), value.strip()


def parse_ibstat(text: str) -> list[IbToolPort]:
    """Every port of ``ibstat`` output, in order."""
    ports: list[IbToolPort] = []
    ca: str | None = None
    ca_type: str | None = None
    current: IbToolPort | None = None
    for line in text.splitlines():
        found = _IBSTAT_CA.match(line)
        if found:
            ca, ca_type, current = found.group(1), None, None
            continue
        port = _IBSTAT_PORT.match(line)
        if port and ca is not None:
            current = IbToolPort(ca, int(port.group(1)), ca_type=ca_type)
            ports.append(current)
            continue
        if ca is None or not line[:1].isspace():
            continue
        key, value = _key_value(line)
        if key == "ca type":
            ca_type = value
        elif current is None:
            continue
        elif key == "state":
            current.state = _IBSTAT_STATES.get(value, value.upper() or None)
        elif key == "physical state":
            current.phys_state = value or None
        elif key == "rate":
            current.rate_gbps = rate_gbps(value)
        elif key == "link layer":
            current.link_layer = value or None
    return ports


def parse_ibstatus(text: str) -> list[IbToolPort]:
    """Every port of ``ibstatus`` output, in order."""
    ports: list[IbToolPort] = []
    current: IbToolPort | None = None
    for line in text.splitlines():
        found = _IBSTATUS_PORT.match(line)
        if found:
            current = IbToolPort(found.group(1), int(found.group(2)))
            ports.append(current)
            continue
        if current is None or not line[:1].isspace():
            continue
        key, value = _key_value(line)
        if key == "state":
            current.state = state_word(value)
        elif key == "phys state":
            current.phys_state = state_word(value)
        elif key == "rate":
            current.rate_gbps = rate_gbps(value)
        elif key == "link_layer":
            current.link_layer = value or None
    return ports

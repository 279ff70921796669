"""NVIDIA driver (NVRM) kernel messages that report GPU faults, turned into payload events.

Formats, from NVIDIA's "Xid Errors" catalogue and captured logs:

- ``NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.`` — the
  bus id without function; older drivers omit ``PCI:``, Grace systems use non-zero domains
  (``PCI:0018:01:00``); ``pid='<unknown>', name=<unknown>`` when no process is involved; the
  channel is ``Ch 00000030`` (older) or ``channel 0x0000000c`` (R570+); NVLink5 Xids 144–150
  carry a unit, a severity and a link (``SAW_MVB Nonfatal XC0 i0 Link 0 (0x… ×6)``); Xid 45 can
  say ``caused by previous Xid 149``; Xid 154 says ``GPU recovery action changed from 0x0 (None)
  to 0x1 (GPU Reset Required)`` (later drivers: ``PF FLR``, ``OS Reboot``, ``Node Reboot
  Required``, ``Drain P2P``).
- Without an Xid: ``NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.``, ``NVRM: GPU at
  PCI:0000:01:00: GPU has fallen off the bus`` and the multi-line probe-time ``NVRM: The NVIDIA
  GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen off the bus …`` →
  ``gpu_fallen_off_bus``; ``NVRM: GPU 0000:09:00.0: RmInitAdapter failed! (0x22:0x56:894)`` →
  ``gpu_lost`` (the driver could not bring the GPU up).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from agents.kernel.timestamps import split_prefix
from agents.payload import EventDict, make_event, utc_now
from agents.topology.pci import nvml_bus_id

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\):\s*(\d+)(?:,\s*)?(.*)", re.S)
_PID = re.compile(r"^pid=('?<unknown>'?|\d+),\s*")
_NAME = re.compile(r"^name=([^,]*),\s*")
_CHANNEL = re.compile(r"^(?:Ch ([0-9a-fA-F]{8})|channel (0x[0-9a-fA-F]+))[,.]?\s*")
_RECOVERY = re.compile(
    r"recovery action changed from 0x[0-9a-fA-F]+ \(([^)]*)\) to 0x[0-9a-fA-F]+ \(([^)]*)\)"
)
_NVLINK = re.compile(r"^\S+ (Fatal|Nonfatal) XC\d+ i\d+ Link (-?\d+)")
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")
_PCI = re.compile(r"(?:PCI:)?\b([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\b")
_KMSG_DICT = re.compile(r"^\s+[A-Z][A-Z0-9_]*=")


@dataclass(frozen=True)
class XidDetails:
    """The parts of an Xid line. ``pci_bus_id`` is NVML's spelling; ``pid`` and
    ``process_name`` are ``None`` for ``'<unknown>'``; ``channel`` as printed (``00000030`` or
    ``0x0000000c``); ``text`` is what follows them; ``recovery_action`` is Xid 154's new action
    (``GPU Reset Required``, ``PF FLR``, ``OS Reboot`` …); ``severity`` and ``link`` are the
    NVLink5 Xids' ``Fatal``/``Nonfatal`` and link number; ``caused_by_xid`` names the Xid an
    Xid 45 follows from. A number no Xid, PID or link can have (a garbled line: beyond
    2³¹−1, or thousands of digits that ``int()`` refuses) is ``None``."""

    xid: int | None
    pci_bus_id: str | None
    pid: int | None = None
    process_name: str | None = None
    channel: str | None = None
    text: str = ""
    recovery_action: str | None = None
    severity: str | None = None
    link: int | None = None
    caused_by_xid: int | None = None


def parse_xid(message: str) -> XidDetails | None:
    """The :class:`XidDetails` of an ``NVRM: Xid …`` message (prefixes already removed or not)."""
    match = _XID.search(message)
    if match is None:
        return None
    rest = match[3].strip()
    pid = name = channel = None
    if found := _PID.match(rest):
        pid = _small_int(found[1].strip("'"))
        rest = rest[found.end() :]
    if found := _NAME.match(rest):
        name = None if found[1] == "<unknown>" else found[1]
        rest = rest[found.end() :]
    if found := _CHANNEL.match(rest):
        channel = found[1] or found[2]
        rest = rest[found.end() :]
    recovery = _RECOVERY.search(rest)
    nvlink = _NVLINK.match(rest)
    caused_by = _CAUSED_BY.search(rest)
    return XidDetails(
        xid=_small_int(match[2]),
        pci_bus_id=nvml_bus_id(match[1]),
        pid=pid,
        process_name=name,
        channel=channel,
        text=rest,
        recovery_action=recovery[2] if recovery else None,
        severity=nvlink[1] if nvlink else None,
        link=_small_int(nvlink[2]) if nvlink else None,
        caused_by_xid=_small_int(caused_by[1]) if caused_by else None,
    )


#: The largest Xid code, PID or link number kept (the server's Xid field is a 32-bit int).
MAX_SMALL_INT = 2**31 - 1
_SMALL_INT = re.compile(r"-?[0-9]{1,10}")


def _small_int(text: str) -> int | None:
    """``text`` (digits, maybe a leading ``-``) as an int within ±:data:`MAX_SMALL_INT`, else
    ``None``: never ``int()``'s ValueError for 4,300 digits and more."""
    if not _SMALL_INT.fullmatch(text):  # not str.isdigit(): it takes "²", which int() refuses
        return None
    value = int(text)
    return value if -MAX_SMALL_INT <= value <= MAX_SMALL_INT else None


def parse_kernel_line(
    line: str, *, now: datetime | None = None, boot_time: datetime | None = None
) -> EventDict | None:
    """One event from one kernel log record (which may span lines), or ``None``.

    ``occurred_at`` comes from the line's prefix (see :mod:`agents.kernel.timestamps`); a time
    since boot needs ``boot_time``; without a usable time it is ``now`` (default: the clock).
    The event's ``message`` is the record without its prefixes; ``gpu_uuid`` is ``None`` (the
    server matches the GPU by ``pci_bus_id``)."""
    moment = now or utc_now()
    stamp, message = split_prefix(line.rstrip("\n"), now=moment, boot_time=boot_time)
    message = message.strip()
    if "NVRM:" not in message:
        return None
    occurred_at = stamp or moment
    details = parse_xid(message)
    if details is not None:
        return make_event(
            "xid",
            occurred_at,
            pci_bus_id=details.pci_bus_id,
            xid=details.xid,
            message=message,
        )
    if "fallen off the bus" in message:
        kind = "gpu_fallen_off_bus"
    elif "RmInitAdapter failed" in message:
        kind = "gpu_lost"
    else:
        return None
    bus = _PCI.search(message)
    return make_event(
        kind, occurred_at, pci_bus_id=nvml_bus_id(bus[1]) if bus else None, message=message
    )


def parse_kernel_log(
    lines: Iterable[str], *, now: datetime | None = None, boot_time: datetime | None = None
) -> list[EventDict]:
    """Every event of a kernel log, one per occurrence, in order. Indented continuation lines
    (a multi-line message as ``dmesg`` and ``journalctl`` print it) join their record; the
    ``KEY=value`` dictionary lines of ``/dev/kmsg`` are skipped."""
    moment = now or utc_now()
    events = []
    for record in join_records(lines):
        event = parse_kernel_line(record, now=moment, boot_time=boot_time)
        if event is not None:
            events.append(event)
    return events


def join_records(lines: Iterable[str]) -> Iterator[str]:
    """Lines grouped into records: an indented line continues the record before it."""
    record: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if _KMSG_DICT.match(line):
            continue
        if record and line[:1].isspace() and line.strip():
            record.append(line.strip())
            continue
        if record:
            yield "\n".join(record)
        record = [line] if line.strip() else []
    if record:
        yield "\n".join(record)

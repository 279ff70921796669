"""The prefixes kernel log lines arrive with, and the time each one carries.

- ``/dev/kmsg`` records: ``<prio>,<seq>,<µs since boot>,<flags>[,…];<message>`` (the kernel's
  Documentation/ABI/testing/dev-kmsg), non-printable bytes escaped as ``\\xNN``;
- ``dmesg``: ``[12345.678901] `` (seconds since boot); ``dmesg -T``: ``[Sun Feb 23 16:24:18 2025] ``
  (local time); ``dmesg --time-format iso``: ``2025-01-21T04:41:44,283302+00:00 ``, and
  ``dmesg --decode`` adds ``kern  :warn  : ``;
- journald and syslog: ``Jan 02 03:04:05 host kernel: `` (local time, no year),
  ``2025-01-02T03:04:05.123456+00:00 host kernel: `` (``journalctl -o short-iso``) or a bare
  ``kernel: ``.

Times since boot need the boot time (``btime`` of ``/proc/stat``); they follow the monotonic
clock, so after a suspend they drift by the time slept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

_KMSG = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;")
_MONOTONIC = re.compile(r"^\[\s*(\d+\.\d+)\]\s?")
_CTIME = re.compile(r"^\[([A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4})\]\s?")
_DECODE = re.compile(
    r"^(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
    r"\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:\s"
)
_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s+")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d)\s+")
_KERNEL = re.compile(r"^(?:\S+\s+)?kernel:\s?")
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def split_prefix(
    line: str, *, now: datetime, boot_time: datetime | None
) -> tuple[datetime | None, str]:
    """``(time, message)``: the time of the first prefix that carries one (``None`` if none
    does or a time since boot comes without ``boot_time``) and the line without its prefixes."""
    moment: datetime | None = None
    text = line
    while True:
        found = _strip_one(text, now, boot_time)
        if found is None:
            return moment, text
        stamp, text = found
        moment = moment or stamp


def _strip_one(
    text: str, now: datetime, boot_time: datetime | None
) -> tuple[datetime | None, str] | None:
    parsers: list[tuple[re.Pattern[str], Callable[[re.Match[str]], datetime | None]]] = [
        (_KMSG, lambda m: _since_boot(boot_time, int(m[3]) / 1e6)),
        (_MONOTONIC, lambda m: _since_boot(boot_time, float(m[1]))),
        (_CTIME, lambda m: _local(datetime.strptime(_squeeze(m[1]), "%a %b %d %H:%M:%S %Y"))),
        (_ISO, lambda m: _iso(m[1])),
        (_SYSLOG, lambda m: _syslog(m[1], now)),
        (_DECODE, lambda m: None),
        (_KERNEL, lambda m: None),
    ]
    for pattern, stamp in parsers:
        match = pattern.match(text)
        if match:
            rest = text[match.end() :]
            if pattern is _KMSG:
                rest = _ESCAPE.sub(lambda e: chr(int(e[1], 16)), rest.split("\n", 1)[0])
            try:
                moment = stamp(match)
            except (ValueError, OverflowError):  # 29 Feb in another year; 10**15 s since boot
                moment = None
            if moment is not None and not EARLIEST <= moment <= LATEST:
                moment = None  # a garbled prefix: the server takes no time outside these
            return moment, rest
    return None


#: The times a kernel log prefix may give (the server's bounds, docs/ingest.md); others are
#: garbled and the line's time is unknown.
EARLIEST = datetime(1970, 1, 2, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def _since_boot(boot_time: datetime | None, seconds: float) -> datetime | None:
    return None if boot_time is None else boot_time + timedelta(seconds=seconds)


def _squeeze(text: str) -> str:
    return re.sub(r" +", " ", text)


def _local(naive: datetime) -> datetime:
    """A naive time from the log is the machine's local time."""
    return naive.astimezone()


def _iso(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace(",", "."))
    return moment if moment.tzinfo else _local(moment)


def _syslog(text: str, now: datetime) -> datetime:
    """Syslog omits the year: take ``now``'s, or the year before when that lies ahead (a
    December line read in January)."""
    parsed = datetime.strptime(f"{now.year} {_squeeze(text)}", "%Y %b %d %H:%M:%S")
    moment = _local(parsed)
    if moment - now > timedelta(days=1):
        moment = _local(parsed.replace(year=now.year - 1))
    return moment

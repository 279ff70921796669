"""The kernel log as a host source: NVRM Xid lines become events, read as they arrive.

Two readers:

- ``/dev/kmsg`` (the kernel's Documentation/ABI/testing/dev-kmsg): opened ``O_RDONLY |
  O_NONBLOCK`` and moved to the end, so the history already in the ring buffer is not sent
  again; each ``read`` returns one record; ``EAGAIN`` means nothing new; ``EPIPE`` means records
  were overwritten before we read them (counted, and reading goes on). In a container without
  ``CAP_SYSLOG`` the open fails with ``EPERM``: one collection error, no crash.
- a plain file (``--kmsg FILE``: a syslog or ``dmesg -w`` output), followed like ``tail -F``:
  new lines only, from the start again after truncation, and on to the new file after rotation.

Kernel times since boot are turned into wall time with ``btime`` of ``/proc/stat``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents.collectors.host import HostSource
from agents.kernel.follow import FileFollower
from agents.kernel.xid import parse_kernel_log
from agents.payload import EventDict, utc_now

#: Records read per drain at most, so a storm of kernel messages cannot stall the agent.
MAX_RECORDS = 10_000


class DevKmsgReader:
    """New records of ``/dev/kmsg``, one string per record (``prio,seq,µs,flags;message``)."""

    def __init__(self, path: Path, *, read: Callable[[int, int], bytes] = os.read) -> None:
        self.path = path
        self._read = read
        self._fd: int | None = None
        #: Records lost to the ring buffer wrapping before they were read (``EPIPE``).
        self.overwritten = 0

    def poll(self, limit: int = MAX_RECORDS) -> list[str]:
        """The records that arrived since the last call.

        Raises:
            OSError: the device cannot be opened or read (``EPERM`` in a container); the next
                call tries again."""
        if self._fd is None:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            try:
                os.lseek(fd, 0, os.SEEK_END)
            except OSError:
                os.close(fd)
                raise
            self._fd = fd
        records: list[str] = []
        while len(records) < limit:
            try:
                chunk = self._read(self._fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:
                self.overwritten += 1
                continue
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                self.close()
                raise
            if not chunk:
                break
            # One record per read from the device; a regular file (tests) returns many lines.
            text = chunk.decode("utf-8", errors="replace")
            records.extend(line for line in text.split("\n") if line and not line[0].isspace())
        return records

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class KmsgSource(HostSource):
    """Turns the kernel's NVRM lines into ``xid``, ``gpu_fallen_off_bus`` and ``gpu_lost`` events.

    ``path`` follows a plain file instead of ``device`` (``/dev/kmsg``); ``from_start`` reads that
    file from its beginning instead of its end. ``procfs`` is where ``stat`` is read for the
    boot time.
    """

    name = "kmsg"

    def __init__(
        self,
        path: Path | None = None,
        *,
        device: Path = Path("/dev/kmsg"),
        procfs: Path = Path("/proc"),
        from_start: bool = False,
        reader: DevKmsgReader | None = None,
    ) -> None:
        self.procfs = procfs
        self._follower = FileFollower(path, from_start=from_start) if path else None
        self._device = None if self._follower else (reader or DevKmsgReader(device))
        self._source = str(path or (reader.path if reader else device))
        self._boot_time: datetime | None = None
        self._boot_time_read = False
        self._errors: list[dict[str, str]] = []
        self._failing: str | None = None
        self._overwritten_seen = 0
        self._early: list[EventDict] = []
        self._read_this_round = 0

    def collect(self, now: datetime) -> dict[str, list[dict[str, Any]]]:
        """No section: this source only yields events."""
        return {}

    def drain_events(self) -> list[EventDict]:
        """The events of the kernel lines that arrived since the last call (those read by
        :meth:`urgent_pending` first)."""
        events = self._early + self._read_events()
        self._early, self._read_this_round = [], 0
        return events

    def urgent_pending(self) -> bool:
        """Read the lines that arrived (non-blocking, like a round does) and keep their events
        for :meth:`drain_events`; whether any line was an NVRM event (every one is urgent:
        an Xid, a GPU fallen off the bus). A round reads at most :data:`MAX_RECORDS` lines in
        all, early reads included (the server refuses a batch of more events)."""
        self._early += self._read_events()
        return bool(self._early)

    def _read_events(self) -> list[EventDict]:
        reader = self._follower or self._device
        budget = MAX_RECORDS - self._read_this_round
        if budget <= 0:
            return []
        try:
            lines = reader.poll(budget) if reader else []
            self._read_this_round += len(lines)
        except OSError as exc:
            self._fail(f"cannot read {self._source}: {exc.strerror or exc}; no Xid events")
            return []
        self._failing = None
        self._report_overwritten()
        if not lines:
            return []
        return parse_kernel_log(lines, now=utc_now(), boot_time=self.boot_time())

    def collection_errors(self) -> list[dict[str, str]]:
        errors, self._errors = self._errors, []
        return errors

    def boot_time(self) -> datetime | None:
        """When the machine booted (``btime`` in ``<procfs>/stat``), read once; ``None`` and
        one collection error when it cannot be read."""
        if not self._boot_time_read:
            self._boot_time_read = True
            try:
                text = (self.procfs / "stat").read_text(encoding="ascii", errors="replace")
                seconds = next(int(ln.split()[1]) for ln in text.splitlines() if ln[:6] == "btime ")
                self._boot_time = datetime.fromtimestamp(seconds, UTC)
            except (OSError, StopIteration, ValueError, IndexError) as exc:
                message = f"no btime in {self.procfs / 'stat'} ({exc!r}): kernel times unknown"
                self._errors.append({"source": self.name, "message": message})
        return self._boot_time

    def close(self) -> None:
        """Close the device or file."""
        if self._device is not None:
            self._device.close()
        if self._follower is not None:
            self._follower.close()

    def _report_overwritten(self) -> None:
        lost = (self._device.overwritten if self._device else 0) - self._overwritten_seen
        if lost > 0:
            self._overwritten_seen += lost
            self._errors.append(
                {
                    "source": self.name,
                    "message": f"{lost} kernel log gap(s): records overwritten before being read",
                }
            )

    def _fail(self, message: str) -> None:
        """Report a failure once, not at every poll, until it clears or changes."""
        if message != self._failing:
            self._errors.append({"source": self.name, "message": message})
        self._failing = message

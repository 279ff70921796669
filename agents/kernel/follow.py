"""Following a growing log file like ``tail -F``: only complete new lines, from the start again
after the file is truncated (``copytruncate``), and on to the new file after it is rotated
(renamed and re-created), once the old one's last lines are read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

#: Bytes read per poll at most; the rest waits for the next poll.
MAX_BYTES_PER_POLL = 8 * 1024 * 1024


class FileFollower:
    """New complete lines of ``path`` at each :meth:`poll`.

    At the first poll an existing file is read from its end (``from_start`` reads it whole); a
    file that appears later, or replaces a rotated one, is read from its beginning.
    """

    def __init__(self, path: Path, *, from_start: bool = False) -> None:
        self.path = path
        self._from_start = from_start
        self._file: BinaryIO | None = None
        self._identity: tuple[int, int] | None = None
        self._partial = b""
        self._pending: list[str] = []
        self._polled = False

    def poll(self, limit: int = 10_000) -> list[str]:
        """The complete lines written since the last call (at most ``limit``; the rest wait).

        Raises:
            OSError: the file cannot be opened (absent, unreadable) and none is open."""
        first, self._polled = not self._polled, True
        if self._file is None:
            self._open(at_end=first and not self._from_start)
        lines = self._read_lines()
        if self._rotated():
            if self._partial:  # the old file's last line, never ended by a newline
                lines.append(self._partial.decode("utf-8", errors="replace"))
            self.close()
            self._open(at_end=False)
            lines += self._read_lines()
        lines, self._pending = lines[:limit], lines[limit:]
        return lines

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._partial = b""

    def _open(self, *, at_end: bool) -> None:
        handle = open(self.path, "rb", buffering=0)  # noqa: SIM115 - held across polls
        stat = os.fstat(handle.fileno())
        self._identity = (stat.st_dev, stat.st_ino)
        if at_end:
            handle.seek(0, os.SEEK_END)
        self._file = handle
        self._partial = b""

    def _rotated(self) -> bool:
        """Whether ``path`` now names another file than the one open (a missing path is not a
        rotation yet: the old file is kept until the new one appears)."""
        try:
            stat = self.path.stat()
        except OSError:
            return False
        return (stat.st_dev, stat.st_ino) != self._identity

    def _read_lines(self) -> list[str]:
        """The lines kept from the last poll and the complete lines written since."""
        lines, self._pending = self._pending, []
        handle = self._file
        if handle is None:
            return lines
        if os.fstat(handle.fileno()).st_size < handle.tell():
            handle.seek(0)  # truncated in place: everything in it now is new
            self._partial = b""
        budget = MAX_BYTES_PER_POLL
        while budget > 0:
            chunk = handle.read(min(budget, 1024 * 1024))
            if not chunk:
                break
            budget -= len(chunk)
            *complete, self._partial = (self._partial + chunk).split(b"\n")
            lines.extend(line.decode("utf-8", errors="replace") for line in complete)
        return lines

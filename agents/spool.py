"""A bounded on-disk spool of batches waiting to be acknowledged by the server.

One file per batch, ``<sequence>-<batch_id>.json``: the zero-padded sequence makes lexical
order the send order, across restarts. Files are written atomically (temporary file, fsync,
rename, fsync of the directory), so a crash leaves either the whole batch or nothing. When the
spool is over its byte or file bound, the oldest batches are dropped, counted and logged. So
are they when the disk fills up before the bound is reached (``ENOSPC``, ``EDQUOT``): the
newest readings are kept, as under the bound, instead of every new batch being refused.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.numbers import ascii_int
from agents.payload import Payload, bulk_length, encode_payload

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_FILES = 100_000
_SUFFIX = ".json"
_TMP_PREFIX = ".tmp-"
_SEQ_DIGITS = 16
#: errno values of a full disk or an exhausted quota.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


@dataclass(frozen=True)
class SpooledBatch:
    """A batch read back from the spool: its file, its payload and its size on disk (bytes)."""

    path: Path
    payload: Payload
    size_bytes: int

    @property
    def batch_id(self) -> str:
        """The batch's original ``batch_id``."""
        return str(self.payload["batch_id"])

    @property
    def sample_count(self) -> int:
        """How many samples the batch carries."""
        return bulk_length(self.payload.get("samples"))


class Spool:
    """The spool directory ``directory`` bounded by ``max_bytes`` and ``max_files``.

    Thread-safe. Counters: :attr:`dropped_batches` (evicted because the spool was full) and
    :attr:`bad_files` (unreadable files moved aside as ``*.bad``).

    Raises:
        OSError: the directory cannot be created or listed.
        ValueError: a bound is not positive.
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_files: int = DEFAULT_MAX_FILES,
    ) -> None:
        if max_bytes <= 0 or max_files <= 0:
            raise ValueError("spool bounds must be positive")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.dropped_batches = 0
        self.bad_files = 0
        self._lock = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._entries: dict[str, int] = {}  # file name → size, kept sorted by name on use
        self._next_seq = 0
        self._rescan()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def total_bytes(self) -> int:
        """The bytes of all spooled batches."""
        with self._lock:
            return sum(self._entries.values())

    def put(self, payload: Payload) -> Path | None:
        """Write ``payload`` as the newest batch and return its path.

        Evicts the oldest batches first when the bounds would be exceeded. A batch larger than
        ``max_bytes`` on its own is dropped (counted, logged) and ``None`` returned.

        When the disk is full (``ENOSPC``/``EDQUOT``), the oldest batches are dropped one by
        one (counted, logged) until the write succeeds.

        Raises:
            OSError: the disk refused the write (read-only; or full with no batch left to
                drop); nothing is left behind.
        """
        data = encode_payload(payload)
        with self._lock:
            if len(data) > self.max_bytes:
                self.dropped_batches += 1
                log.warning(
                    "spool: batch %s (%d bytes) exceeds the spool bound of %d bytes; dropped",
                    payload.get("batch_id"),
                    len(data),
                    self.max_bytes,
                )
                return None
            self._evict_for(len(data))
            name = f"{self._next_seq:0{_SEQ_DIGITS}d}-{payload['batch_id']}{_SUFFIX}"
            self._next_seq += 1
            path = self.directory / name
            while True:
                try:
                    _write_atomically(path, data)
                    break
                except OSError as exc:
                    if exc.errno not in _DISK_FULL or not self._entries:
                        raise
                    self._drop_oldest(f"disk full ({exc.strerror})")
            self._entries[name] = len(data)
            return path

    def oldest(self) -> SpooledBatch | None:
        """Return the oldest readable batch, or ``None`` when the spool is empty.

        Unreadable files (not JSON, not a payload) are moved aside as ``<name>.bad`` with a log
        line and skipped; a file deleted behind our back is forgotten.
        """
        with self._lock:
            for name in sorted(self._entries):
                path = self.directory / name
                try:
                    payload = _read_payload(path)
                except FileNotFoundError:
                    del self._entries[name]
                    continue
                except (OSError, ValueError) as exc:
                    self._set_aside(name, exc)
                    continue
                return SpooledBatch(path=path, payload=payload, size_bytes=self._entries[name])
            return None

    def remove(self, batch: SpooledBatch) -> None:
        """Delete ``batch`` from the spool (acknowledged, or refused for good)."""
        with self._lock:
            self._entries.pop(batch.path.name, None)
            batch.path.unlink(missing_ok=True)

    def _rescan(self) -> None:
        for path in self.directory.iterdir():
            name = path.name
            if name.startswith(_TMP_PREFIX):
                # A write interrupted before its rename: the batch was never spooled.
                path.unlink(missing_ok=True)
            elif name.endswith(_SUFFIX) and path.is_file():
                seq = name.split("-", 1)[0]
                if ascii_int(seq) is None:
                    self._set_aside(name, ValueError("unexpected file name"), known=False)
                    continue
                self._entries[name] = path.stat().st_size
                self._next_seq = max(self._next_seq, int(seq) + 1)
        if self._entries:
            log.info(
                "spool: %d batch(es), %d bytes waiting in %s",
                len(self._entries),
                sum(self._entries.values()),
                self.directory,
            )

    def _evict_for(self, incoming: int) -> None:
        total = sum(self._entries.values())
        while self._entries:
            if len(self._entries) + 1 <= self.max_files and total + incoming <= self.max_bytes:
                return
            total -= self._drop_oldest(
                f"spool full ({self.max_files} files, {self.max_bytes} bytes max)"
            )

    def _drop_oldest(self, why: str) -> int:
        """Delete the oldest batch, count and log it; return its size (bytes)."""
        name = min(self._entries)
        size = self._entries.pop(name)
        (self.directory / name).unlink(missing_ok=True)
        self.dropped_batches += 1
        log.warning(
            "%s: dropped oldest batch %s (%d bytes); %d batch(es) lost so far",
            why,
            name,
            size,
            self.dropped_batches,
        )
        return size

    def _set_aside(self, name: str, exc: Exception, *, known: bool = True) -> None:
        if known:
            self._entries.pop(name, None)
        self.bad_files += 1
        source = self.directory / name
        try:
            source.rename(source.with_name(name + ".bad"))
        except OSError as rename_exc:
            log.error("spool: cannot move aside corrupt %s: %s", source, rename_exc)
            return
        log.warning("spool: corrupt batch file %s moved aside as %s.bad: %s", source, name, exc)


def _read_payload(path: Path) -> Payload:
    payload: Any = json.loads(path.read_bytes().decode("utf-8"))
    if not isinstance(payload, dict) or not isinstance(payload.get("batch_id"), str):
        raise ValueError("not a payload object with a batch_id")
    return payload


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(_TMP_PREFIX + path.name)
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # not supported on this platform or filesystem
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

"""NFS mounts from ``<procfs>/self/mountstats`` → the ``nfs_mounts`` section (docs/ingest.md,
"nfs_mounts"); the format is described in :mod:`agents.host.mountstats`.

What the fields are, per mount:

* ``read_bytes`` / ``write_bytes`` — the ``bytes:`` line's *server* bytes: what READ and WRITE
  moved over the wire, direct I/O and read-ahead included (the normal/direct counters say what
  applications asked for, cache hits included, which is not the load on server and network).
* ``ops`` — all RPC operations of the mount (Σ of the per-op ``ops`` column).
* ``retransmits`` — Σ over operations of (transmissions − ops), as nfs-utils' ``mountstats``
  counts them; an operation whose transmissions are below its ops (seen on older kernels)
  counts 0.
* ``avg_rtt_s`` — Δ(READ + WRITE rtt ms) ÷ Δ(READ + WRITE ops) ÷ 1000: the round trip of data
  operations, like nfsiostat's read/write RTT; cheap metadata calls (GETATTR, ACCESS) would
  otherwise hide a slow data path. ``None`` when no READ or WRITE completed in the interval.

The cumulative counters are exact ints (64-bit, up to 2⁶⁴−1; a sum that would not fit is
``None``). Rates follow the disks' rules: first reading and any interval in which a counter went
backwards give ``None``.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from agents.host.base import HostSourceBase, RateTracker, exact_counter, last_per_key, too_long
from agents.host.mountstats import NfsMountStats, parse_mountstats
from agents.host.procnet import parse_rpc_nfs
from agents.payload import format_timestamp

_DATA_OPS = ("READ", "WRITE")


def mount_totals(mount: NfsMountStats) -> dict[str, int | None]:
    """The cumulative counters of ``mount`` the section and its rates are made of:
    ``read_bytes``, ``write_bytes``, ``ops``, ``retransmits``, and ``data_ops`` /
    ``data_rtt_ms`` (READ + WRITE) for ``avg_rtt_s``. ``None`` where the kernel did not say."""
    ops = mount.operations.values()
    counted = [op for op in ops if "ops" in op]
    retried = [op for op in counted if "transmissions" in op]
    data = [mount.operations.get(name, {}) for name in _DATA_OPS]
    have_data = all("ops" in op and "rtt_ms" in op for op in data)
    return {
        "read_bytes": mount.bytes.get("server_read_bytes"),
        "write_bytes": mount.bytes.get("server_write_bytes"),
        "ops": sum(op["ops"] for op in counted) if counted else None,
        "retransmits": (
            sum(max(0, op["transmissions"] - op["ops"]) for op in retried) if retried else None
        ),
        "data_ops": sum(op["ops"] for op in data) if have_data else None,
        "data_rtt_ms": sum(op["rtt_ms"] for op in data) if have_data else None,
    }


#: The server's length limits of the entry's text fields (a longer one → the entry is left out).
TEXT_LIMITS = {"mountpoint": 512, "export": 512, "version": 16}


class NfsSource(HostSourceBase):
    """The ``nfs_mounts`` section, one entry per NFS mount point of ``<procfs>/<pid>/mountstats``
    (``pid="1"`` for the host's mounts from inside a container); a mount point mounted over
    reports its last (visible) mount only."""

    name = "nfs"

    def __init__(self, procfs: Path = Path("/proc"), *, pid: str = "self") -> None:
        super().__init__()
        self.path = procfs / pid / "mountstats"
        self.rpc_path = procfs / "net" / "rpc" / "nfs"
        self._rates: RateTracker[tuple[str, str, str]] = RateTracker()

    def collect(self, now: datetime) -> dict[str, list[dict[str, Any]]]:
        """One ``nfs_mounts`` entry per NFS mount, dated ``now``."""
        text = self._read_text(self.path)
        if text is None:
            return {}
        stamp = format_timestamp(now)
        entries = []
        for mount in last_per_key(parse_mountstats(text), lambda m: m.mountpoint):
            totals = mount_totals(mount)
            key = (mount.mountpoint, mount.export, mount.fstype)
            interval = self._rates.interval(key, now, totals)
            entry: dict[str, Any] = {
                "sampled_at": stamp,
                "mountpoint": mount.mountpoint,
                "export": mount.export,
                "version": mount.version,
                "read_bytes": exact_counter(totals["read_bytes"]),
                "write_bytes": exact_counter(totals["write_bytes"]),
                "ops": exact_counter(totals["ops"]),
                "retransmits": exact_counter(totals["retransmits"]),
                "read_bytes_per_s": None,
                "write_bytes_per_s": None,
                "ops_per_s": None,
                "retransmits_per_s": None,
                "avg_rtt_s": None,
            }
            if interval is not None:
                rtt_ms = interval.ratio(("data_rtt_ms",), ("data_ops",))
                entry.update(
                    read_bytes_per_s=interval.per_second("read_bytes"),
                    write_bytes_per_s=interval.per_second("write_bytes"),
                    ops_per_s=interval.per_second("ops"),
                    retransmits_per_s=interval.per_second("retransmits"),
                    avg_rtt_s=None if rtt_ms is None else rtt_ms / 1000.0,
                )
            long_field = too_long(entry, TEXT_LIMITS)
            if long_field:
                self._error(f"{mount.mountpoint[:200]}…: {long_field} too long, left out")
                continue
            entries.append(entry)
        self._rates.forget_unseen()
        return {"nfs_mounts": entries}

    def rpc_retransmissions(self) -> int | None:
        """The NFS client's RPC retransmissions over all mounts since boot (``rpc`` line of
        ``<procfs>/net/rpc/nfs``), or ``None`` when there is no NFS client (file absent)."""
        try:
            text = self.rpc_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        return parse_rpc_nfs(text).get("rpc", {}).get("retransmissions")

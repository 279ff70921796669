"""``/proc/<pid>/mountstats`` — the NFS client's per-mount statistics.

Each mount starts ``device <source> mounted on <mountpoint> with fstype <type> [statvers=1.1]``;
only NFS mounts carry the indented lines that follow (fs/nfs/super.c ``nfs_show_stats`` and
net/sunrpc/stats.c ``rpc_clnt_show_stats``, the format nfs-utils' ``mountstats`` reads):

* ``opts:`` mount options (``vers=4.2``, ``proto=rdma`` …);
* ``events:`` 27 event counters (include/linux/nfs_iostat.h, ``enum nfs_stat_eventcounters``);
* ``bytes:`` normal/direct/server read and write bytes, then pages read and written;
* ``xprt:`` one line per transport connection (``nconnect`` gives several), whose fields depend
  on the transport: ``udp``, ``tcp`` and ``rdma`` (many more fields);
* ``per-op statistics`` then ``OP: ops transmissions timeouts bytes_sent bytes_received
  queue_ms rtt_ms execute_ms [errors]`` (``errors`` since statvers 1.1 on newer kernels).

Kernels add and drop fields: a line with fewer fields gives the names it has, extra fields are
ignored. Every counter is kept as a Python int — they are 64-bit and must stay exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agents.host.mountinfo import unescape
from agents.numbers import ascii_int

#: A line's counters by name (only the fields present on the line).
Counters = dict[str, int]

EVENT_FIELDS = (
    "inode_revalidate", "dentry_revalidate", "data_invalidate", "attr_invalidate", "vfs_open",
    "vfs_lookup", "vfs_access", "vfs_update_page", "vfs_read_page", "vfs_read_pages",
    "vfs_write_page", "vfs_write_pages", "vfs_getdents", "vfs_setattr", "vfs_flush",
    "vfs_fsync", "vfs_lock", "vfs_release", "congestion_wait", "setattr_trunc", "extend_write",
    "silly_rename", "short_read", "short_write", "delay", "pnfs_read", "pnfs_write",
)  # fmt: skip
BYTES_FIELDS = (
    "normal_read_bytes", "normal_write_bytes", "direct_read_bytes", "direct_write_bytes",
    "server_read_bytes", "server_write_bytes", "read_pages", "write_pages",
)  # fmt: skip
OP_FIELDS = (
    "ops", "transmissions", "timeouts", "bytes_sent", "bytes_received", "queue_ms", "rtt_ms",
    "execute_ms", "errors",
)  # fmt: skip
_XPRT_COMMON = ("port", "bind_count")
_XPRT_CONNECTED = ("connect_count", "connect_time_s", "idle_time_s")
_XPRT_TAIL = ("sends", "recvs", "bad_xids", "req_u", "bklog_u")
XPRT_FIELDS: dict[str, tuple[str, ...]] = {
    "udp": (*_XPRT_COMMON, *_XPRT_TAIL, "max_slots", "sending_u", "pending_u"),
    "tcp": (*_XPRT_COMMON, *_XPRT_CONNECTED, *_XPRT_TAIL, "max_slots", "sending_u", "pending_u"),
    "rdma": (
        *_XPRT_COMMON, *_XPRT_CONNECTED, *_XPRT_TAIL, "read_chunks", "write_chunks",
        "reply_chunks", "total_rdma_request", "total_rdma_reply", "pullup_copy", "fixup_copy",
        "hardway_register", "failed_marshal", "bad_reply", "nomsg_calls", "recovered_mrs",
        "orphaned_mrs", "allocated_mrs", "local_invalidates", "empty_sendctx_q",
        "reply_waits_for_send",
    ),
}  # fmt: skip
XPRT_FIELDS["local"] = XPRT_FIELDS["tcp"]

_DEVICE = re.compile(r"^device (\S+) mounted on (\S+) with fstype (\S+)(?: statvers=(\S+))?")


@dataclass
class Transport:
    """One ``xprt:`` line: the transport (``tcp``, ``udp``, ``rdma`` …) and its counters."""

    protocol: str
    counters: Counters


@dataclass
class NfsMountStats:
    """One NFS mount of ``mountstats``."""

    export: str
    mountpoint: str
    fstype: str
    statvers: str | None
    options: dict[str, str] = field(default_factory=dict)
    age_s: int | None = None
    events: Counters = field(default_factory=dict)
    bytes: Counters = field(default_factory=dict)
    transports: list[Transport] = field(default_factory=list)
    operations: dict[str, Counters] = field(default_factory=dict)

    @property
    def version(self) -> str | None:
        """The NFS version as ``3``, ``4.0``, ``4.1``, ``4.2`` (``vers=`` and, on older kernels,
        ``minorversion=``), or from the fstype when the options do not say."""
        vers = self.options.get("vers")
        if vers == "4" and "minorversion" in self.options:
            return f"4.{self.options['minorversion']}"
        if vers:
            return vers
        return "4" if self.fstype == "nfs4" else None


def _named(names: tuple[str, ...], values: list[str]) -> Counters:
    counters: Counters = {}
    for name, value in zip(names, values, strict=False):
        try:
            counters[name] = int(value)
        except ValueError:
            break
    return counters


def parse_mountstats(text: str) -> list[NfsMountStats]:
    """The NFS mounts (``fstype nfs`` or ``nfs4``) of ``mountstats`` text, in order; other
    ``device`` lines are skipped, unknown lines ignored."""
    mounts: list[NfsMountStats] = []
    current: NfsMountStats | None = None
    in_ops = False
    for line in text.splitlines():
        found = _DEVICE.match(line)
        if found:
            export, mountpoint, fstype, statvers = found.groups()
            current = None
            in_ops = False
            if fstype in ("nfs", "nfs4"):
                current = NfsMountStats(unescape(export), unescape(mountpoint), fstype, statvers)
                mounts.append(current)
            continue
        if current is None or (":" not in line and "per-op statistics" not in line):
            continue
        key, _, rest = line.strip().partition(":")
        values = rest.split()
        if in_ops:
            current.operations[key] = _named(OP_FIELDS, values)
        elif key == "opts":
            options = (item.partition("=") for item in rest.strip().split(","))
            current.options = {name: value for name, _, value in options}
        elif key == "age" and values and ascii_int(values[0]) is not None:
            current.age_s = ascii_int(values[0])
        elif key == "events":
            current.events = _named(EVENT_FIELDS, values)
        elif key == "bytes":
            current.bytes = _named(BYTES_FIELDS, values)
        elif key == "xprt" and values:
            names = XPRT_FIELDS.get(values[0], ())
            current.transports.append(Transport(values[0], _named(names, values[1:])))
        elif key == "per-op statistics":
            in_ops = True
    return mounts

"""Filesystems → the ``mounts`` section (docs/ingest.md, "mounts"): the mount table from
``<procfs>/self/mountinfo`` and the space of each from ``statvfs(3)``.

``statvfs`` on a hard NFS mount whose server is gone blocks in the kernel, uninterruptibly and
for as long as the server stays away. It therefore runs in its own daemon thread that the source
waits for at most ``statvfs_timeout_s``; a mount that does not answer is skipped with a
collection error, and is not asked again while that thread is still stuck, so a dead server
costs one parked thread per mount, not one per reading.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from agents.host.base import HostSourceBase, last_per_key, too_long
from agents.host.mountinfo import MountInfo, parse_mountinfo
from agents.payload import format_timestamp

#: Filesystems that hold no storage worth a dashboard row: kernel interfaces, memory-backed
#: filesystems (tmpfs, ramfs: /dev/shm, /run and kubelet's secrets), container image layers
#: (overlay, squashfs, erofs) and lxcfs' fake /proc files. Close to node_exporter's
#: ``--collector.filesystem.fs-types-exclude`` default, plus tmpfs and the container ones.
DEFAULT_EXCLUDED_FSTYPES = frozenset(
    {
        "autofs", "binfmt_misc", "bpf", "cgroup", "cgroup2", "configfs", "debugfs", "devpts",
        "devtmpfs", "efivarfs", "erofs", "fuse.lxcfs", "fusectl", "hugetlbfs", "iso9660",
        "mqueue", "nfsd", "nsfs", "overlay", "proc", "pstore", "ramfs", "rootfs", "rpc_pipefs",
        "securityfs", "selinuxfs", "squashfs", "sysfs", "tmpfs", "tracefs",
    }
)  # fmt: skip
#: Mount points under which only the system or container runtimes mount things (regular
#: expressions, matched at the start; node_exporter's ``mount-points-exclude`` default plus
#: kubelet's per-pod volumes and containerd's task roots).
DEFAULT_EXCLUDED_MOUNTPOINTS = (
    r"/(dev|proc|sys)($|/)",
    r"/run/credentials/",
    r"/run/containerd/",
    r"/var/lib/docker/.",
    r"/var/lib/containers/storage/.",
    r"/var/lib/kubelet/pods/",
)

#: The server's length limits of the entry's text fields (a longer one → the entry is left out).
TEXT_LIMITS = {"mountpoint": 512, "device": 256, "fstype": 32}

StatvfsFunc = Callable[[str], os.statvfs_result]


@dataclass(frozen=True)
class MountFilter:
    """Which mounts become ``mounts`` entries.

    ``exclude_fstypes``: filesystem types to leave out (:data:`DEFAULT_EXCLUDED_FSTYPES`).
    ``exclude_mountpoints``: regular expressions matched at the start of the mount point
    (:data:`DEFAULT_EXCLUDED_MOUNTPOINTS`). ``one_per_device``: keep only the first mount of each
    ``major:minor`` — bind mounts show the same filesystem's space again.

    Always, before these: a mount point mounted over keeps only its last (visible) mount.
    """

    exclude_fstypes: frozenset[str] = DEFAULT_EXCLUDED_FSTYPES
    exclude_mountpoints: tuple[str, ...] = DEFAULT_EXCLUDED_MOUNTPOINTS
    one_per_device: bool = True

    def select(self, mounts: list[MountInfo]) -> list[MountInfo]:
        """``mounts`` without the excluded ones, in mount-table order."""
        patterns = [re.compile(p) for p in self.exclude_mountpoints]
        seen: set[tuple[int, int]] = set()
        kept = []
        for mount in last_per_key(mounts, lambda m: m.mountpoint):
            if mount.fstype in self.exclude_fstypes:
                continue
            if any(p.match(mount.mountpoint) for p in patterns):
                continue
            if self.one_per_device:
                if (mount.major, mount.minor) in seen:
                    continue
                seen.add((mount.major, mount.minor))
            kept.append(mount)
        return kept


class TimedStatvfs:
    """``statvfs`` that gives up after ``timeout_s`` (see the module docstring)."""

    def __init__(self, timeout_s: float = 5.0, statvfs: StatvfsFunc = os.statvfs) -> None:
        self.timeout_s = timeout_s
        self._statvfs = statvfs
        self._stuck: dict[str, threading.Thread] = {}

    def __call__(self, path: str) -> os.statvfs_result:
        """The ``statvfs`` of ``path``.

        Raises:
            TimeoutError: it did not answer in time, or an earlier call on ``path`` still hangs.
            OSError: ``statvfs`` failed (no such path, permission denied, stale NFS handle …).
        """
        stuck = self._stuck.get(path)
        if stuck is not None:
            if stuck.is_alive():
                raise TimeoutError(f"statvfs({path}) still hangs from an earlier reading")
            del self._stuck[path]
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["result"] = self._statvfs(path)
            except OSError as exc:
                box["error"] = exc

        thread = threading.Thread(target=work, name=f"statvfs {path}", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            self._stuck[path] = thread
            raise TimeoutError(f"statvfs({path}) did not answer within {self.timeout_s:g} s")
        if "error" in box:
            raise box["error"]
        result: os.statvfs_result = box["result"]
        return result


class MountSource(HostSourceBase):
    """The ``mounts`` section: one entry per selected mount with ``used_bytes`` =
    (f_blocks − f_bfree) × f_frsize (space used, including what only root may use) and
    ``total_bytes`` = f_blocks × f_frsize. A filesystem reporting no blocks at all (a pseudo
    filesystem not in the exclude list) is left out.

    ``procfs`` is where ``<pid>/mountinfo`` is read; ``rootfs`` is prefixed to mount points for
    ``statvfs``. An agent in a container with the host's ``/proc`` and root mounted (at
    ``/host/proc`` and ``/host``) passes ``pid="1"`` to see the host's mounts, not its own.
    """

    name = "mounts"

    def __init__(
        self,
        procfs: Path = Path("/proc"),
        *,
        rootfs: Path = Path("/"),
        pid: str = "self",
        mount_filter: MountFilter | None = None,
        statvfs_timeout_s: float = 5.0,
        statvfs: StatvfsFunc = os.statvfs,
    ) -> None:
        super().__init__()
        self.path = procfs / pid / "mountinfo"
        self.rootfs = rootfs
        self.mount_filter = mount_filter or MountFilter()
        self._statvfs = TimedStatvfs(statvfs_timeout_s, statvfs)

    def collect(self, now: datetime) -> dict[str, list[dict[str, Any]]]:
        """One ``mounts`` entry per selected, answering mount, dated ``now``."""
        try:
            # Paths are bytes to the kernel: keep undecodable ones as surrogates for statvfs.
            text = self.path.read_bytes().decode("utf-8", errors="surrogateescape")
        except OSError as exc:
            self._error(f"cannot read {self.path}: {exc.strerror or exc}")
            return {}
        stamp = format_timestamp(now)
        entries = []
        for mount in self.mount_filter.select(parse_mountinfo(text)):
            path = str(self.rootfs / mount.mountpoint.lstrip("/"))
            try:
                space = self._statvfs(path)
            except (OSError, TimeoutError) as exc:
                self._error(f"{mount.mountpoint} ({mount.fstype}): {exc}")
                continue
            if space.f_blocks == 0:
                continue
            block = space.f_frsize or space.f_bsize
            entry = {
                "sampled_at": stamp,
                "mountpoint": mount.mountpoint,
                "device": mount.source,
                "fstype": mount.fstype,
                "used_bytes": (space.f_blocks - space.f_bfree) * block,
                "total_bytes": space.f_blocks * block,
            }
            long_field = too_long(entry, TEXT_LIMITS)
            if long_field:
                self._error(f"{mount.mountpoint[:200]}…: {long_field} too long, left out")
                continue
            entries.append(entry)
        return {"mounts": entries}

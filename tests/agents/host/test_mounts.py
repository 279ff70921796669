"""Mounts: mountinfo parses with its optional fields and octal escapes, pseudo and container
filesystems are filtered, statvfs gives exact bytes, and a hanging statvfs never freezes a
reading."""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.host.mountinfo import parse_mountinfo, unescape
from agents.host.mounts import MountFilter, MountSource
from tests.agents.host.fakefs import proc_fixture, write_file

NOW = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)
CONTAINER = "mountinfo-container-lxcfs-overlay.txt"


def fake_statvfs(blocks: int, free: int, frsize: int = 4096) -> os.statvfs_result:
    return os.statvfs_result((frsize, frsize, blocks, free, free, 1000, 500, 500, 0, 255))


def test_a_container_mount_table_parses_every_line_with_its_optional_fields() -> None:
    mounts = parse_mountinfo(proc_fixture(CONTAINER))
    assert len(mounts) == 171
    root = mounts[0]
    assert (root.mount_id, root.parent_id, root.major, root.minor) == (838, 589, 253, 0)
    assert root.root == "/var/lib/lxc/ny2g2r14hh2-lxc/rootfs"
    assert (root.mountpoint, root.options) == ("/", "rw,relatime")
    assert root.optional_fields == ("shared:518", "master:1")
    assert (root.fstype, root.source, root.super_options) == (
        "ext4",
        "/dev/mapper/vgroot-lvroot",
        "rw",
    )
    dev = mounts[1]
    assert (dev.mountpoint, dev.optional_fields, dev.fstype, dev.source) == (
        "/dev",
        (),
        "tmpfs",
        "none",
    )
    lxcfs = next(m for m in mounts if m.mountpoint == "/proc/diskstats")
    assert (lxcfs.fstype, lxcfs.source, lxcfs.root) == ("fuse.lxcfs", "lxcfs", "/proc/diskstats")
    types = Counter(m.fstype for m in mounts)
    assert (types["overlay"], types["tmpfs"], types["ext4"], types["fuse.lxcfs"]) == (48, 54, 14, 9)


def test_the_default_filter_keeps_only_real_storage_once_per_device() -> None:
    kept = MountFilter().select(parse_mountinfo(proc_fixture(CONTAINER)))
    assert [(m.mountpoint, m.fstype, m.source) for m in kept] == [
        ("/", "ext4", "/dev/mapper/vgroot-lvroot"),
        ("/mnt/local-volume/vol-0", "ext4", "/dev/nvme2n1p1"),
        ("/mnt/lepton-cache/vol-0", "ext4", "/dev/nvme3n1p1"),
        ("/mnt/lepton-cache/vol-1", "ext4", "/dev/nvme4n1p1"),
        ("/mnt/lepton-cache/vol-2", "ext4", "/dev/nvme5n1p1"),
        ("/mnt/lepton-cache/vol-3", "ext4", "/dev/nvme6n1p1"),
        ("/mnt/lepton-cache/vol-4", "ext4", "/dev/nvme7n1p1"),
        ("/mnt/remote-volume/training", "fuse.testfs", "TestFS:test-us-east-training"),
        ("/mnt/remote-volume/dev", "fuse.testfs", "TestFS:test-lepton-ai-us-east-dev"),
        (
            "/var/lib/juicefs/volume/pv-ws-test-storage-rsync-training-by-lepton-0-rupytp",
            "fuse.testfs",
            "TestFS:ws-test-us-east-training",
        ),
    ]


def test_the_filter_is_configurable() -> None:
    mounts = parse_mountinfo(proc_fixture(CONTAINER))
    everything = MountFilter(
        exclude_fstypes=frozenset(), exclude_mountpoints=(), one_per_device=False
    )
    assert len(everything.select(mounts)) == 171
    with_tmpfs = MountFilter(exclude_fstypes=frozenset({"overlay", "proc", "sysfs"}))
    assert "tmpfs" in {m.fstype for m in with_tmpfs.select(mounts)}


def test_a_mount_point_mounted_over_keeps_only_its_visible_mount(tmp_path: Path) -> None:
    write_file(
        tmp_path,
        "self/mountinfo",
        "30 1 8:1 / /data rw - xfs /dev/sda1 rw\n"
        "31 1 8:17 / /data rw - xfs /dev/sdb1 rw\n"
        "32 1 8:33 / /scratch rw - ext4 /dev/sdc1 rw\n"
        f"33 1 8:49 / /{'y' * 600} rw - ext4 /dev/sdd1 rw\n",
    )
    source = MountSource(tmp_path, statvfs=lambda path: fake_statvfs(blocks=10, free=5))
    entries = source.collect(NOW)["mounts"]
    assert [(e["mountpoint"], e["device"]) for e in entries] == [
        ("/data", "/dev/sdb1"),
        ("/scratch", "/dev/sdc1"),
    ]
    [error] = source.collection_errors()
    assert error["message"].endswith("mountpoint too long, left out")


def test_octal_escapes_in_paths_and_sources_are_decoded() -> None:
    line = (
        r"41 25 0:52 / /mnt/my\040disk\011tab rw,relatime shared:30 - cifs "
        r"//srv/share\040name rw,vers=3.0"
    )
    [mount] = parse_mountinfo(line + "\n")
    assert mount.mountpoint == "/mnt/my disk\ttab"
    assert mount.source == "//srv/share name"
    assert unescape(r"back\134slash\012") == "back\\slash\n"


def test_used_and_total_bytes_are_exact_from_statvfs(tmp_path: Path) -> None:
    write_file(tmp_path, "self/mountinfo", proc_fixture(CONTAINER))
    asked: list[str] = []

    def statvfs(path: str) -> os.statvfs_result:
        asked.append(path)
        return fake_statvfs(blocks=1_855_425_871, free=1_000_000_000)

    source = MountSource(tmp_path, statvfs=statvfs)
    entries = source.collect(NOW)["mounts"]
    assert len(entries) == 10 and len(asked) == 10
    assert entries[1] == {
        "sampled_at": "2026-11-29T16:00:00.000Z",
        "mountpoint": "/mnt/local-volume/vol-0",
        "device": "/dev/nvme2n1p1",
        "fstype": "ext4",
        "used_bytes": 855_425_871 * 4096,
        "total_bytes": 1_855_425_871 * 4096,
    }
    assert source.collection_errors() == []


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event that releases the "dead NFS server" at the end of the test, whatever happens."""
    event = threading.Event()
    yield event
    event.set()


def test_a_hanging_statvfs_is_skipped_with_an_error_and_not_asked_again_while_stuck(
    tmp_path: Path, gate: threading.Event
) -> None:
    write_file(
        tmp_path,
        "self/mountinfo",
        "30 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "31 30 0:60 / /mnt/dead rw - nfs4 nfs-server-a:/export rw\n",
    )
    calls: Counter[str] = Counter()

    def statvfs(path: str) -> os.statvfs_result:
        calls[path] += 1
        if path == "/mnt/dead":
            gate.wait(10)
        return fake_statvfs(blocks=100, free=40)

    source = MountSource(tmp_path, statvfs=statvfs, statvfs_timeout_s=0.05)
    first = source.collect(NOW)["mounts"]
    assert [e["mountpoint"] for e in first] == ["/"]
    assert source.collection_errors() == [
        {
            "source": "mounts",
            "message": "/mnt/dead (nfs4): statvfs(/mnt/dead) did not answer within 0.05 s",
        }
    ]
    second = source.collect(NOW)["mounts"]
    assert [e["mountpoint"] for e in second] == ["/"]
    [error] = source.collection_errors()
    assert "still hangs" in error["message"]
    assert calls["/mnt/dead"] == 1
    gate.set()
    for _ in range(200):
        entries = source.collect(NOW)["mounts"]
        source.collection_errors()
        if len(entries) == 2:
            break
        threading.Event().wait(0.01)
    assert [e["used_bytes"] for e in entries] == [60 * 4096, 60 * 4096]


def test_unreadable_mounts_are_errors_and_the_rest_still_report(tmp_path: Path) -> None:
    write_file(
        tmp_path,
        "self/mountinfo",
        "30 1 8:1 / / rw - ext4 /dev/sda1 rw\n32 30 8:2 / /gone rw - xfs /dev/sda2 rw\n",
    )

    def statvfs(path: str) -> os.statvfs_result:
        if path == "/gone":
            raise FileNotFoundError(2, "No such file or directory")
        return fake_statvfs(blocks=10, free=10)

    source = MountSource(tmp_path, statvfs=statvfs)
    assert [e["used_bytes"] for e in source.collect(NOW)["mounts"]] == [0]
    [error] = source.collection_errors()
    assert error["message"].startswith("/gone (xfs): ")


def test_a_containerised_agent_reads_pid_1_and_prefixes_rootfs_for_statvfs(
    tmp_path: Path,
) -> None:
    write_file(tmp_path, "1/mountinfo", "30 1 8:1 / /data rw - xfs /dev/md0 rw\n")
    asked: list[str] = []

    def statvfs(path: str) -> os.statvfs_result:
        asked.append(path)
        return fake_statvfs(blocks=10, free=5)

    source = MountSource(tmp_path, rootfs=Path("/host"), pid="1", statvfs=statvfs)
    [entry] = source.collect(NOW)["mounts"]
    assert (asked, entry["mountpoint"]) == (["/host/data"], "/data")

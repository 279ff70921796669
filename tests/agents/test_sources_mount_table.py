"""Whose mount table the agent reads: its own when it measures ``/``; the host's init's (PID 1
under ``--procfs``) when ``--rootfs`` names the host's root mounted in a container
(deploy/kubernetes/agent-daemonset.yaml), where its own would list the container's mounts."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from agents.collectors.none import NoGpuCollector
from agents.host import MountSource, NfsSource
from agents.sources import SourcePaths, host_sources

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def mountinfo_line(mountpoint: str) -> str:
    return f"36 1 8:1 / {mountpoint} rw,relatime shared:1 - ext4 /dev/sda1 rw\n"


def table_sources(paths: SourcePaths) -> tuple[MountSource, NfsSource]:
    sources = host_sources(NoGpuCollector(), paths)
    (mounts,) = [s for s in sources if isinstance(s, MountSource)]
    (nfs,) = [s for s in sources if isinstance(s, NfsSource)]
    return mounts, nfs


def test_measuring_slash_reads_its_own_table() -> None:
    mounts, nfs = table_sources(SourcePaths())
    assert mounts.path == Path("/proc/self/mountinfo")
    assert nfs.path == Path("/proc/self/mountstats")


def test_another_root_reads_the_table_of_pid_1_and_measures_under_it(tmp_path: Path) -> None:
    procfs, root = tmp_path / "proc", tmp_path / "root"
    (procfs / "1").mkdir(parents=True)
    (procfs / "self").mkdir()
    (procfs / "1" / "mountinfo").write_text(mountinfo_line("/scratch"))
    (procfs / "self" / "mountinfo").write_text(mountinfo_line("/container-only"))
    (root / "scratch").mkdir(parents=True)

    mounts, nfs = table_sources(SourcePaths(procfs=procfs, rootfs=root))
    assert nfs.path == procfs / "1" / "mountstats"
    section = mounts.collect(NOW)["mounts"]
    assert [m["mountpoint"] for m in section] == ["/scratch"]
    expected = os.statvfs(root / "scratch")
    assert section[0]["total_bytes"] == expected.f_blocks * expected.f_frsize

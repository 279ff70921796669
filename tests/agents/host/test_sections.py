"""All four sources pointed at one fake /proc and /sys assembled from the shared fixtures produce
exactly the sections and field names of docs/ingest.md; every proc fixture has a test."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agents.collectors.host import HOST_SECTIONS
from agents.host import (
    DiskStatsSource,
    InfinibandSource,
    MountSource,
    NfsSource,
    storage_and_network_sources,
)
from agents.host.base import RateTracker
from tests.agents.host.fakefs import proc_fixture, write_file
from tests.shared_fixtures import fixture_names

DOC = Path(__file__).resolve().parents[3] / "docs" / "ingest.md"
T0 = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)


def documented_fields(section: str) -> list[str]:
    """The keys of the first entry of ``section``'s JSON example in docs/ingest.md."""
    text = DOC.read_text(encoding="utf-8")
    block = re.search(rf"### `{section}`.*?```json\n(.*?)```", text, re.S)
    assert block is not None, f"no example for {section} in {DOC}"
    example = json.loads("{" + block.group(1) + "}")
    return list(example[section][0])


@pytest.fixture
def node(tmp_path: Path, shared_ib_sysfs: Path) -> tuple[Path, Path]:
    """A fake ``procfs`` and ``sysfs`` holding one node's worth of fixtures."""
    procfs = tmp_path / "proc"
    write_file(procfs, "diskstats", proc_fixture("diskstats-nvme-zram-20-columns.txt"))
    write_file(procfs, "self/mountinfo", proc_fixture("mountinfo-container-lxcfs-overlay.txt"))
    write_file(procfs, "self/mountstats", proc_fixture("mountstats-el8-nfsv3-v40-v41-v42-mix.txt"))
    write_file(procfs, "net/rpc/nfs", proc_fixture("proc-net-rpc-nfs-client.txt"))
    return procfs, shared_ib_sysfs


def _statvfs(path: str) -> os.statvfs_result:
    return os.statvfs_result((4096, 4096, 1000, 250, 250, 100, 50, 50, 0, 255))


def test_every_section_has_exactly_the_documented_fields(node: tuple[Path, Path]) -> None:
    procfs, sysfs = node
    sources = [
        DiskStatsSource(procfs),
        MountSource(procfs, statvfs=_statvfs),
        NfsSource(procfs),
        InfinibandSource(sysfs),
    ]
    sections: dict[str, list[dict[str, Any]]] = {}
    for moment in (T0, T0 + timedelta(seconds=10)):
        sections = {}
        for source in sources:
            sections.update(source.collect(moment))
            assert source.collection_errors() == []
    assert sorted(sections) == sorted(HOST_SECTIONS)
    for name, entries in sections.items():
        assert entries, name
        for entry in entries:
            assert list(entry) == documented_fields(name), name
            assert entry["sampled_at"] == "2026-11-29T16:00:10.000Z"
    counts = {name: len(entries) for name, entries in sections.items()}
    assert counts == {"disks": 13, "mounts": 10, "nfs_mounts": 4, "nic_ports": 9}
    # Same files twice: every rate is known, and zero.
    assert {e["read_bytes_per_s"] for e in sections["disks"]} == {0.0}
    assert {e["ops_per_s"] for e in sections["nfs_mounts"]} == {0.0}
    assert {e["tx_bytes_per_s"] for e in sections["nic_ports"]} == {0.0}
    assert sections["mounts"][0]["used_bytes"] == 750 * 4096


def test_the_default_set_reads_under_the_given_roots(node: tuple[Path, Path]) -> None:
    procfs, sysfs = node
    sources = storage_and_network_sources(procfs, sysfs)
    assert [s.name for s in sources] == ["diskstats", "mounts", "nfs", "infiniband"]
    assert sources[0].collect(T0)["disks"][0]["device"] == "nvme0n1"
    assert sources[3].collect(T0)["nic_ports"][0]["device"] == "mlx5_0"


def test_every_proc_fixture_is_asserted_on_by_a_test() -> None:
    names = fixture_names("proc")
    if not names:
        pytest.skip("../shared/fixtures/proc is absent in this clone")
    tests = "".join(p.read_text(encoding="utf-8") for p in Path(__file__).parent.glob("test_*.py"))
    assert [name for name in names if name not in tests] == []


def test_a_rate_tracker_forgets_things_that_went_away() -> None:
    tracker: RateTracker[str] = RateTracker()
    assert tracker.interval("sda", T0, {"reads": 1}) is None
    tracker.forget_unseen()
    tracker.forget_unseen()
    assert tracker.interval("sda", T0 + timedelta(seconds=2), {"reads": 5}) is None
    interval = tracker.interval("sda", T0 + timedelta(seconds=4), {"reads": 9, "new": 1})
    assert interval is not None
    assert (interval.deltas, interval.seconds) == ({"reads": 4}, 2.0)
    assert tracker.interval("sda", T0 + timedelta(seconds=4), {"reads": 10}) is None

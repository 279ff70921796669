"""/proc/diskstats: every field-count variant parses exactly, partitions and RAM/loop devices are
filtered as documented, and rates come from two readings with wrap → null."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agents.host.diskstats import (
    DiskFilter,
    DiskStats,
    DiskStatsSource,
    parse_diskstats,
    partition_parent,
)
from tests.agents.host.fakefs import proc_fixture, write_file

T0 = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)


def _by_name(text: str) -> dict[str, DiskStats]:
    return {d.name: d for d in parse_diskstats(text)}


def test_old_kernel_names_with_slash_parse_and_partitions_of_listed_disks_are_dropped() -> None:
    disks = parse_diskstats(proc_fixture("diskstats-cciss-slash-names-old-kernel.txt"))
    assert len(disks) == 81
    part = next(d for d in disks if d.name == "cciss/c0d0p1")
    assert (part.major, part.minor, part.reads, part.read_sectors, part.io_ticks_ms) == (
        104,
        1,
        34,
        896,
        107,
    )
    assert part.discards is None and part.flushes is None
    selected = [d.name for d in DiskFilter().select(disks)]
    assert len(selected) == 37
    assert selected[:4] == ["sda", "sdb", "cciss/c0d0", "cciss/c0d1"]
    assert not any(name.startswith("ram") or name.endswith("p1") for name in selected)
    assert "md0" in selected and "dm-4" in selected


def test_a_san_host_with_107_devices_keeps_every_disk_but_ram_and_loop() -> None:
    disks = parse_diskstats(proc_fixture("diskstats-hp-bl920-gen8-107-devices-san.txt"))
    assert len(disks) == 107
    sdb = next(d for d in disks if d.name == "sdb")
    assert (sdb.reads, sdb.read_sectors, sdb.writes, sdb.write_sectors) == (
        25964,
        807513,
        9777,
        753466,
    )
    assert (sdb.io_ticks_ms, sdb.weighted_ms, sdb.discards) == (20388, 47691, None)
    selected = DiskFilter().select(disks)
    assert len(selected) == 83
    assert {"sdaa", "dm-0", "dm-12"} <= {d.name for d in selected}


def test_mixed_14_18_and_20_column_lines_fill_discard_and_flush_fields_only_when_present() -> None:
    disks = _by_name(proc_fixture("diskstats-mixed-11-15-17-field-formats.txt"))
    assert len(disks) == 51
    sda = disks["sda"]
    assert (sda.reads, sda.reads_merged, sda.read_sectors, sda.read_ms) == (
        25354637,
        34367663,
        1003346126,
        18492372,
    )
    assert sda.discards is None
    sdb = disks["sdb"]
    assert (sdb.discards, sdb.discards_merged, sdb.discard_sectors, sdb.discard_ms) == (
        68851,
        0,
        1925173784,
        11130,
    )
    assert sdb.flushes is None and sdb.flush_ms is None
    sdc = disks["sdc"]
    assert (sdc.flushes, sdc.flush_ms) == (1555, 1944)
    selected = [d.name for d in DiskFilter().select(list(disks.values()))]
    assert selected == [
        "sda", "dm-0", "dm-1", "dm-2", "dm-3", "dm-4", "dm-5", "mmcblk0", "fd0", "vda", "sr0",
        "nvme0n1", "sdb", "sdc",
    ]  # fmt: skip


def test_a_20_column_nvme_and_zram_host_keeps_zram_and_drops_nvme_partitions() -> None:
    disks = parse_diskstats(proc_fixture("diskstats-nvme-zram-20-columns.txt"))
    assert len(disks) == 15
    nvme = disks[0]
    assert (nvme.name, nvme.reads, nvme.write_sectors, nvme.flushes, nvme.flush_ms) == (
        "nvme0n1",
        2501871,
        294611954,
        578748,
        2081931,
    )
    names = [d.name for d in DiskFilter().select(disks)]
    assert len(names) == 13
    assert "nvme0n1p1" not in names and {"zram0", "zram2"} <= set(names)


def test_virtio_and_ceph_rbd_partitions_are_dropped_behind_their_disks() -> None:
    disks = parse_diskstats(proc_fixture("diskstats-virtio-ceph-rbd.txt"))
    assert len(disks) == 12
    rbd0 = next(d for d in disks if d.name == "rbd0")
    assert (rbd0.major, rbd0.reads, rbd0.read_sectors, rbd0.weighted_ms) == (
        251,
        536206,
        4293386,
        1547033,
    )
    assert [d.name for d in DiskFilter().select(disks)] == [
        "vda", "vdb", "sr0", "dm-0", "dm-1", "rbd0", "rbd1",
    ]  # fmt: skip


def test_partitions_follow_the_kernel_naming_rule() -> None:
    names = ["sda", "sdp", "nvme0n1", "ram1", "dm-1", "mmcblk0", "cciss/c0d0"]
    assert partition_parent("sda1", names) == "sda"
    assert partition_parent("sdp1", names) == "sdp"
    assert partition_parent("nvme0n1p2", names) == "nvme0n1"
    assert partition_parent("mmcblk0p1", names) == "mmcblk0"
    assert partition_parent("cciss/c0d0p1", names) == "cciss/c0d0"
    assert partition_parent("ram10", names) is None
    assert partition_parent("dm-10", names) is None
    assert partition_parent("sdb1", names) is None


def test_the_filter_is_configurable() -> None:
    disks = parse_diskstats(proc_fixture("diskstats-virtio-ceph-rbd.txt"))
    everything = DiskFilter(exclude=(), skip_partitions=False).select(disks)
    assert len(everything) == 12
    assert [d.name for d in DiskFilter(exclude=("sr*", "dm-*")).select(disks)] == [
        "vda", "vdb", "rbd0", "rbd1",
    ]  # fmt: skip


def test_kernel_2_6_short_partition_lines_give_byte_rates_but_no_busy_or_wait(
    tmp_path: Path,
) -> None:
    # The example of Documentation/admin-guide/iostats.rst for 2.6.0–2.6.24 partitions.
    first = parse_diskstats("   3    1 hda1 35486 38030 38030 38030\n")[0]
    assert (first.reads, first.read_sectors, first.writes, first.write_sectors) == (
        35486,
        38030,
        38030,
        38030,
    )
    assert first.read_ms is None and first.io_ticks_ms is None
    source = DiskStatsSource(tmp_path)
    _collect(source, tmp_path, "   3    1 hda1 35486 38030 38030 38030\n", T0)
    later = "   3    1 hda1 35586 40030 38030 38030\n"
    entry = _collect(source, tmp_path, later, T0 + timedelta(seconds=2))
    assert (entry["read_iops"], entry["read_bytes_per_s"], entry["write_iops"]) == (
        50.0,
        512000.0,
        0.0,
    )
    assert (entry["busy_pct"], entry["avg_wait_s"]) == (None, None)


def _line(reads: int, rsect: int, rms: int, writes: int, wsect: int, wms: int, ticks: int) -> str:
    return f"   8       0 sda {reads} 0 {rsect} {rms} {writes} 0 {wsect} {wms} 0 {ticks} 0\n"


def _collect(source: DiskStatsSource, procfs: Path, text: str, at: datetime) -> dict[str, Any]:
    write_file(procfs, "diskstats", text)
    return source.collect(at)["disks"][0]


def test_rates_come_from_two_readings_and_are_null_on_the_first(tmp_path: Path) -> None:
    source = DiskStatsSource(tmp_path)
    first = _collect(source, tmp_path, _line(100, 1000, 50, 200, 4000, 150, 1000), T0)
    assert first == {
        "sampled_at": "2026-11-29T16:00:00.000Z",
        "device": "sda",
        "read_bytes_per_s": None,
        "write_bytes_per_s": None,
        "read_iops": None,
        "write_iops": None,
        "busy_pct": None,
        "avg_wait_s": None,
    }
    later = T0 + timedelta(seconds=10)
    second = _collect(source, tmp_path, _line(1100, 201000, 2050, 700, 14000, 1150, 3500), later)
    assert second == {
        "sampled_at": "2026-11-29T16:00:10.000Z",
        "device": "sda",
        "read_bytes_per_s": 10240000.0,
        "write_bytes_per_s": 512000.0,
        "read_iops": 100.0,
        "write_iops": 50.0,
        "busy_pct": 25.0,
        "avg_wait_s": 0.002,
    }


def test_a_counter_going_backwards_nulls_that_interval_and_the_next_one_recovers(
    tmp_path: Path,
) -> None:
    source = DiskStatsSource(tmp_path)
    _collect(source, tmp_path, _line(100, 1000, 4294967000, 200, 4000, 150, 1000), T0)
    wrapped = _line(200, 2000, 100, 300, 5000, 250, 2000)
    after_wrap = _collect(source, tmp_path, wrapped, T0 + timedelta(seconds=10))
    rates = {k: v for k, v in after_wrap.items() if k not in ("sampled_at", "device")}
    assert set(rates.values()) == {None}
    recovered = _line(300, 2000, 300, 300, 5000, 250, 12000)
    after = _collect(source, tmp_path, recovered, T0 + timedelta(seconds=20))
    assert (after["read_iops"], after["write_iops"], after["busy_pct"]) == (10.0, 0.0, 100.0)
    assert after["avg_wait_s"] == 0.002


def test_an_idle_interval_has_no_average_wait(tmp_path: Path) -> None:
    source = DiskStatsSource(tmp_path)
    idle = _line(100, 1000, 50, 200, 4000, 150, 1000)
    _collect(source, tmp_path, idle, T0)
    entry = _collect(source, tmp_path, idle, T0 + timedelta(seconds=5))
    assert (entry["read_bytes_per_s"], entry["busy_pct"], entry["avg_wait_s"]) == (0.0, 0.0, None)


def test_a_missing_diskstats_is_a_collection_error_not_a_crash(tmp_path: Path) -> None:
    source = DiskStatsSource(tmp_path)
    assert source.collect(T0) == {}
    [error] = source.collection_errors()
    assert error["source"] == "diskstats" and "diskstats" in error["message"]
    assert source.collection_errors() == []

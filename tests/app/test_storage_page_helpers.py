"""Pure helpers of the storage page: URL state in and out, and a mount's block device."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import BadRequest
from app.storage.fleet_now import disk_of
from app.storage.pages import StorageFilters


def test_filters_round_trip_through_their_short_url() -> None:
    f = StorageFilters.parse(
        q=" gpu-a ",
        label=["cluster=a", " ", "rack = r1", "cluster=b"],
        match=" /home ",
        top="20",
        by="max",
        range="6h",
    )
    assert f.labels == (("cluster", "b"), ("rack", "r1"))
    query = f.query()
    assert (
        query == "?range=6h&q=gpu-a&label=cluster%3Db&label=rack%3Dr1&match=%2Fhome&top=20&by=max"
    )
    assert f.query(range="24h", match="") == (
        "?range=24h&q=gpu-a&label=cluster%3Db&label=rack%3Dr1&top=20&by=max"
    )
    assert StorageFilters.parse().query() == ""
    custom = StorageFilters.parse(range="1h", start="2026-11-29T10:00", end="2026-11-29T11:00")
    assert custom.query() == "?start=2026-11-29T10%3A00&end=2026-11-29T11%3A00"


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"label": ["nokey"]}, "label"),
        ({"label": ["=v"]}, "label"),
        ({"top": "0"}, "top"),
        ({"top": "abc"}, "top"),
        ({"by": "p99"}, "by"),
    ],
)
def test_bad_filters_name_the_parameter(raw: dict[str, Any], named: str) -> None:
    with pytest.raises(BadRequest, match=f"^{named}:"):
        StorageFilters.parse(**raw)


class _Disk:
    def __init__(self, name: str) -> None:
        self.device = name


def _disk_name(source: str | None, disks: dict[str, Any]) -> str | None:
    found = disk_of(source, disks)
    return None if found is None else found.device


def test_disk_of_finds_the_device_or_its_whole_disk() -> None:
    disks: dict[str, Any] = {n: _Disk(n) for n in ("md0", "nvme0n1", "sda", "dm-1")}
    assert _disk_name("/dev/md0", disks) == "md0"
    assert _disk_name("/dev/nvme0n1p2", disks) == "nvme0n1"
    assert _disk_name("/dev/sda1", disks) == "sda"
    assert _disk_name("/dev/dm-1", disks) == "dm-1"
    assert disk_of("/dev/sdb1", disks) is None
    assert disk_of("nfs-server:/export", disks) is None
    assert disk_of("tmpfs", disks) is None
    assert disk_of(None, disks) is None

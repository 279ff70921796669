"""Xid series of successive scrapes become events once: a rising count is new occurrences, a
last-Xid gauge that does not move is not repeated."""

from __future__ import annotations

from datetime import UTC, datetime

from app.dcgm.translate import XidReading
from app.dcgm.xid import MAX_PER_SCRAPE, events

AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
URL = "http://n1:9400/metrics"


def last(xid: int, instance: int | None = None, gpu: str = "GPU-a") -> XidReading:
    return XidReading(gpu, "00000000:18:00.0", instance, "last", xid)


def count(xid: int, n: int, gpu: str = "GPU-a") -> XidReading:
    return XidReading(gpu, None, None, "count", xid, n, 300000)


def xids(found: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(e["gpu_uuid"], e["xid"]) for e in found]


def test_a_last_xid_gauge_raises_once_and_again_only_when_it_changes() -> None:
    found, state = events([last(0)], None, at=AT, url=URL)
    assert found == [] and state == {"last": {"GPU-a": 0}, "count": {}}
    found, state = events([last(79)], state, at=AT, url=URL)
    assert found == [
        {
            "occurred_at": AT.isoformat(),
            "kind": "xid",
            "gpu_uuid": "GPU-a",
            "pci_bus_id": "00000000:18:00.0",
            "xid": 79,
            "message": f"Xid 79 (dcgm-exporter {URL}: DCGM_FI_DEV_XID_ERRORS, the GPU's last Xid)",
        }
    ]
    found, state = events([last(79)], state, at=AT, url=URL)
    assert found == []
    found, state = events([], state, at=AT, url=URL)  # a scrape without the series forgets nothing
    found, state = events([last(79)], state, at=AT, url=URL)
    assert found == []
    found, state = events([last(48)], state, at=AT, url=URL)
    assert xids(found) == [("GPU-a", 48)]


def test_a_non_zero_last_xid_at_the_first_scrape_is_raised_and_says_when_is_unknown() -> None:
    found, _ = events([last(13)], None, at=AT, url=URL)
    assert xids(found) == [("GPU-a", 13)]
    assert "DCGM does not say when it occurred" in str(found[0]["message"])


def test_the_gpu_and_its_mig_instance_seeing_one_xid_raise_one_event() -> None:
    found, state = events([last(0), last(0, 13)], None, at=AT, url=URL)
    found, state = events([last(43), last(43, 13)], state, at=AT, url=URL)
    assert xids(found) == [("GPU-a", 43)]
    assert state["last"] == {"GPU-a": 43, "GPU-a/13": 43}


def test_a_window_count_raises_its_rise_and_nothing_as_it_falls() -> None:
    found, state = events([count(42, 1)], None, at=AT, url=URL)
    assert xids(found) == [("GPU-a", 42)]
    assert "DCGM_EXP_XID_ERRORS_COUNT 1 within 300 s" in str(found[0]["message"])
    found, state = events([count(42, 1)], state, at=AT, url=URL)
    assert found == []
    found, state = events([count(42, 3)], state, at=AT, url=URL)
    assert xids(found) == [("GPU-a", 42), ("GPU-a", 42)]
    found, state = events([count(42, 2)], state, at=AT, url=URL)
    assert found == []
    found, state = events([], state, at=AT, url=URL)  # gone from the window: back to 0
    assert state["count"] == {}
    found, state = events([count(42, 1)], state, at=AT, url=URL)
    assert xids(found) == [("GPU-a", 42)]


def test_a_storm_is_capped_per_scrape() -> None:
    found, _ = events([count(119, 5000)], None, at=AT, url=URL)
    assert len(found) == MAX_PER_SCRAPE

"""Xid series of successive scrapes as Xid events, raised once each.

dcgm-exporter serves Xids two ways:

- ``DCGM_FI_DEV_XID_ERRORS``: a gauge of the last Xid the GPU raised (0: none since DCGM
  started watching). A value that differs from the last one seen (and is not 0) is a new event;
  the same value scrape after scrape is the same event, not repeated. The same Xid raised twice
  in a row cannot be told from one: the gauge does not move (the count series below can).
- ``DCGM_EXP_XID_ERRORS_COUNT`` (``--xid-count-window-size``): per Xid (label ``xid``), how
  many occurred within the last ``window_size_in_ms``. A count above the last one seen means
  that many new occurrences; a lower one is old occurrences leaving the window. A series that
  disappears has fallen to 0, so its next appearance counts from 0.

The state (the last value of each series) is stored with the endpoint in the transaction that
stores the events, so a restarted server neither loses nor repeats one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.dcgm.translate import XidReading

#: Occurrences raised at most for one Xid of one GPU in one scrape (a storm is still a storm).
MAX_PER_SCRAPE = 100


def events(
    readings: list[XidReading], state: dict[str, Any] | None, *, at: datetime, url: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The new Xid events (``events[]`` entries of an ingest batch, dated ``at``) and the state
    to keep for the next scrape.

    ``state``: what the previous call returned for this endpoint (``None`` the first time):
    ``{"last": {key: xid}, "count": {key: count}}`` by :attr:`XidReading.key`.
    """
    state = state or {}
    last: dict[str, int] = dict(state.get("last") or {})
    counts_before: dict[str, int] = dict(state.get("count") or {})
    counts: dict[str, int] = {}
    raised: dict[tuple[str, int], tuple[int, XidReading, str]] = {}
    for reading in readings:
        if reading.kind == "last":
            before = last.get(reading.key)
            last[reading.key] = reading.xid
            if reading.xid == 0 or reading.xid == before:
                continue
            how = "DCGM_FI_DEV_XID_ERRORS, the GPU's last Xid"
            if before is None:
                how += " (first scrape of this GPU: DCGM does not say when it occurred)"
            _raise(raised, reading, 1, how)
        else:
            counts[reading.key] = max(counts.get(reading.key, 0), reading.count)
            new = reading.count - counts_before.get(reading.key, 0)
            if new > 0:
                window = f" within {reading.window_ms / 1000:g} s" if reading.window_ms else ""
                how = f"DCGM_EXP_XID_ERRORS_COUNT {reading.count}{window}"
                _raise(raised, reading, min(new, MAX_PER_SCRAPE), how)
    found: list[dict[str, Any]] = []
    for (uuid, xid), (times, reading, how) in raised.items():
        instance = (
            "" if reading.gpu_instance_id is None else f", MIG instance {reading.gpu_instance_id}"
        )
        message = f"Xid {xid} (dcgm-exporter {url}: {how}{instance})"
        found.extend(
            {
                "occurred_at": at.isoformat(),
                "kind": "xid",
                "gpu_uuid": uuid,
                "pci_bus_id": reading.pci_bus_id,
                "xid": xid,
                "message": message,
            }
            for _ in range(times)
        )
    return found, {"last": last, "count": counts}


def _raise(
    raised: dict[tuple[str, int], tuple[int, XidReading, str]],
    reading: XidReading,
    times: int,
    how: str,
) -> None:
    """One GPU's Xid seen by several series (the GPU's and its MIG instances') is raised once,
    as often as the series that saw it most often says."""
    key = (reading.gpu_uuid, reading.xid)
    held = raised.get(key)
    if held is None or times > held[0]:
        raised[key] = (times, reading, how)

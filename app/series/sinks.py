"""Where a batch's rows go, by payload name: ``samples`` (GPU samples) and each dated node
section (``nvlinks``, ``disks``, ``mounts``, ``nfs_mounts``, ``nic_ports``).

The ingest decides which rows to store (:mod:`app.ingest.samples`, :mod:`app.ingest.sections`);
this module binds them to their raw table, its current-state form (:mod:`app.series.latest`)
and, for GPU samples, the arrival feed (:mod:`app.series.arrivals`), and tells which keys are
packed in blocks already.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.orm import Session

from app.series import latest, read
from app.series.tables import (
    DiskSample,
    MountSample,
    NfsSample,
    NicPortSample,
    NvlinkSample,
    gpu_sample,
)
from app.series.writes import StagedRows

#: The payload name of GPU samples.
SAMPLES = "samples"
_RAW: dict[str, Table] = {
    SAMPLES: gpu_sample,
    "nvlinks": NvlinkSample.__table__,  # type: ignore[dict-item]
    "disks": DiskSample.__table__,  # type: ignore[dict-item]
    "mounts": MountSample.__table__,  # type: ignore[dict-item]
    "nfs_mounts": NfsSample.__table__,  # type: ignore[dict-item]
    "nic_ports": NicPortSample.__table__,  # type: ignore[dict-item]
}
Key = tuple[Any, ...]


def staged(name: str, columns: tuple[str, ...], rows: Collection[Sequence[Any]]) -> StagedRows:
    """``rows`` (tuples in ``columns`` order, the owner column first) of payload part ``name``
    bound for its table (:func:`app.series.writes.insert_staged`). GPU samples collect each
    GPU's newest stored ``sampled_at`` and feed the arrivals; a section keeps its current
    readings.

    Raises:
        KeyError: ``name`` is not a payload part stored as samples.
    """
    table = _RAW[name]
    if name == SAMPLES:
        return StagedRows(table, columns, rows, newest_per="gpu_id", feed=True)
    return StagedRows(table, columns, rows, latest=latest.BY_RAW.get(table.name))


def restaged(batch: StagedRows, rows: Collection[Sequence[Any]]) -> StagedRows:
    """``batch`` with other ``rows`` (before it is stored)."""
    return dataclasses.replace(batch, rows=rows)


def packed(session: Session, wanted: Mapping[str, Collection[Key]]) -> dict[str, set[Key]]:
    """Per payload part of ``wanted``, which of its keys (owner, natural key…, ``sampled_at``)
    are stored in packed blocks already (:func:`app.series.read.packed_among`, one statement
    of probes for every part)."""
    found = read.packed_among(session, {_RAW[name].name: keys for name, keys in wanted.items()})
    return {name: found[_RAW[name].name] for name in wanted}

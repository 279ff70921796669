"""Storing the dated node sections of a batch (``nvlinks``, ``disks``, ``mounts``, ``nfs_mounts``,
``nic_ports``): one table each, the same policies as GPU samples.

* An entry dated beyond the future tolerance or before the retention window is not stored,
  counted in ``sections_rejected`` as ``<section>.sampled_at_in_future`` /
  ``<section>.older_than_retention``; an NVLink entry of a GPU the node never reported as
  ``<section>.unknown_gpu``.
* An implausible number is stored as null and counted in ``nulled_values`` as
  ``<section>.<field>``.
* An entry whose key (owner, device…, ``sampled_at``) is already stored, or repeated in the
  batch, is skipped (``ON CONFLICT DO NOTHING``): ``sections_stored`` counts rows that went in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel
from sqlalchemy import Table
from sqlalchemy.orm import Session

from app.fleet.models import Gpu, Node
from app.ingest.schemas import IngestBatchIn
from app.metrics.plausible import Bound, clean_numbers
from app.nics import schemas as nic_schemas
from app.nics.models import NicPortSample
from app.nvlinks import schemas as nvlink_schemas
from app.nvlinks.models import NvlinkSample
from app.storage import schemas as storage_schemas
from app.storage.models import DiskSample, MountSample, NfsSample
from app.timeseries import insert_ignoring_conflicts


@dataclass(frozen=True)
class Section:
    """A dated payload section and the table it is stored in.

    Attributes:
        name: the payload key, e.g. ``"disks"``.
        table: the table; its primary key is (owner column, ``key``…, ``sampled_at``).
        owner: ``"node"`` (column ``node_id``) or ``"gpu"`` (column ``gpu_id``, found by the
            entry's ``gpu_uuid``).
        key: the natural key columns between the owner and ``sampled_at``.
        bounds: plausible ranges of the numeric fields.
    """

    name: str
    table: Table
    owner: Literal["node", "gpu"]
    key: tuple[str, ...]
    bounds: Mapping[str, Bound]

    @property
    def owner_column(self) -> str:
        """``node_id`` or ``gpu_id``."""
        return f"{self.owner}_id"

    @property
    def primary_key(self) -> tuple[str, ...]:
        """The table's primary key columns, in order."""
        return (self.owner_column, *self.key, "sampled_at")


def _table(model: type[Any]) -> Table:
    table: Table = model.__table__
    return table


SECTIONS: tuple[Section, ...] = (
    Section("nvlinks", _table(NvlinkSample), "gpu", ("link",), nvlink_schemas.BOUNDS),
    Section("disks", _table(DiskSample), "node", ("device",), storage_schemas.DISK_BOUNDS),
    Section("mounts", _table(MountSample), "node", ("mountpoint",), storage_schemas.MOUNT_BOUNDS),
    Section("nfs_mounts", _table(NfsSample), "node", ("mountpoint",), storage_schemas.NFS_BOUNDS),
    Section("nic_ports", _table(NicPortSample), "node", ("device", "port"), nic_schemas.BOUNDS),
)


@dataclass
class SectionsOutcome:
    """What :func:`store_sections` did: rows stored per present section, and entries rejected
    by ``<section>.<reason>``."""

    stored: dict[str, int]
    rejected: Counter[str]


def store_sections(
    session: Session,
    *,
    node: Node,
    gpus: dict[str, Gpu],
    batch: IngestBatchIn,
    newest_allowed: datetime,
    oldest_allowed: datetime,
    nulled: Counter[str],
) -> SectionsOutcome:
    """Store every dated section present in ``batch``; counts nulled values into ``nulled``."""
    outcome = SectionsOutcome(stored={}, rejected=Counter())
    for section in SECTIONS:
        entries: list[BaseModel] | None = getattr(batch, section.name)
        if entries is None:
            continue
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        for entry in entries:
            values = entry.model_dump()
            when: datetime = values["sampled_at"]
            if section.owner == "gpu":
                gpu = gpus.get(values.pop("gpu_uuid"))
                owner_id = gpu.id if gpu is not None else None
            else:
                owner_id = node.id
            reason = _rejection(owner_id, when, newest_allowed, oldest_allowed)
            if reason is not None:
                outcome.rejected[f"{section.name}.{reason}"] += 1
                continue
            row = clean_numbers(values, section.bounds, prefix=section.name, nulled=nulled)
            row[section.owner_column] = owner_id
            rows.setdefault(tuple(row[c] for c in section.primary_key), row)
        outcome.stored[section.name] = insert_ignoring_conflicts(
            session, section.table, list(rows.values()), key=section.primary_key
        )
    return outcome


def _rejection(
    owner_id: int | None, when: datetime, newest_allowed: datetime, oldest_allowed: datetime
) -> str | None:
    if owner_id is None:
        return "unknown_gpu"
    if when > newest_allowed:
        return "sampled_at_in_future"
    if when < oldest_allowed:
        return "older_than_retention"
    return None

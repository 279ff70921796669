"""The dated node sections of a batch (``nvlinks``, ``disks``, ``mounts``, ``nfs_mounts``,
``nic_ports``): one table each, the same policies as GPU samples.

* An entry dated beyond the future tolerance or before the retention window is not stored,
  counted in ``sections_rejected`` as ``<section>.sampled_at_in_future`` /
  ``<section>.older_than_retention``; an NVLink entry of a GPU the node never reported as
  ``<section>.unknown_gpu``.
* An implausible number is stored as null and counted in ``nulled_values`` as
  ``<section>.<field>``.
* An entry whose key (owner, device…, ``sampled_at``) is already stored — as a row or in a
  packed block (:func:`drop_packed`) — or repeated in the batch, is skipped (``ON CONFLICT DO
  NOTHING``): ``sections_stored`` counts rows that went in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Any, Literal

from app.fleet.models import Gpu, Node
from app.ingest.rows import SECTION_SPECS, SectionRow, SectionSpec
from app.series import sinks
from app.series.writes import StagedRows


@dataclass(frozen=True)
class Section:
    """A dated payload section, stored by :mod:`app.series.sinks` under its name.

    Attributes:
        name: the payload key, e.g. ``"disks"``.
        owner: ``"node"`` (column ``node_id``) or ``"gpu"`` (column ``gpu_id``, found by the
            entry's ``gpu_uuid``).
        key: the natural key columns between the owner and ``sampled_at``.
        spec: the entry's fields (:mod:`app.ingest.rows`), with their plausible ranges.
    """

    name: str
    owner: Literal["node", "gpu"]
    key: tuple[str, ...]
    spec: SectionSpec

    @property
    def owner_column(self) -> str:
        """``node_id`` or ``gpu_id``."""
        return f"{self.owner}_id"

    @property
    def primary_key(self) -> tuple[str, ...]:
        """The stored row's key columns, in order."""
        return (self.owner_column, *self.key, "sampled_at")


_SPECS = {spec.name: spec for spec in SECTION_SPECS}
SECTIONS: tuple[Section, ...] = (
    Section("nvlinks", "gpu", ("link",), _SPECS["nvlinks"]),
    Section("disks", "node", ("device",), _SPECS["disks"]),
    Section("mounts", "node", ("mountpoint",), _SPECS["mounts"]),
    Section("nfs_mounts", "node", ("mountpoint",), _SPECS["nfs_mounts"]),
    Section("nic_ports", "node", ("device", "port"), _SPECS["nic_ports"]),
)


@dataclass
class SectionsPlan:
    """The dated sections of a batch sorted out: rows to store per present section, and
    entries rejected by ``<section>.<reason>``."""

    staged: dict[str, StagedRows]
    rejected: Counter[str]
    #: Per present section, its rows by primary key (the first entry of a key repeated in the
    #: batch) and the names of the values nulled in the entries of each key (counted once the
    #: rows to store are known, :func:`drop_packed`).
    rows: dict[str, dict[tuple[Any, ...], tuple[Any, ...]]] = field(default_factory=dict)
    nulled_by_row: dict[tuple[str, tuple[Any, ...]], list[str]] = field(default_factory=dict)

    @property
    def stored(self) -> dict[str, int]:
        """Rows stored per present section (once :attr:`staged` is stored)."""
        return {name: staged.inserted for name, staged in self.staged.items()}


def plan_sections(
    *,
    node: Node,
    gpus: dict[str, Gpu],
    sections: dict[str, list[SectionRow]],
    newest_allowed: datetime,
    oldest_allowed: datetime,
) -> SectionsPlan:
    """Sort every dated section present in the batch (``sections``: its rows by section
    name, see :mod:`app.ingest.rows`); :func:`drop_packed` then leaves out the rows stored in
    blocks already and counts the nulled values."""
    plan = SectionsPlan(staged={}, rejected=Counter())
    gpu_ids = {uuid: gpu.id for uuid, gpu in gpus.items()}
    for section in SECTIONS:
        entries = sections.get(section.name)
        if entries is None:
            continue
        spec = section.spec
        columns = (section.owner_column, *spec.columns)
        when_at = [f.name for f in spec.fields].index("sampled_at")
        by_gpu = section.owner == "gpu"
        # Where the primary key lies in ``columns``: rows repeated in the batch keep the first.
        keyer = itemgetter(*(columns.index(c) for c in section.primary_key))
        plain = _plain_rows(
            entries,
            keyer,
            when_at,
            gpu_ids if by_gpu else None,
            node.id,
            newest_allowed,
            oldest_allowed,
        )
        if plain is not None:
            rows = plain
            for (_, nulled_names), key in zip(entries, rows, strict=True):
                if nulled_names:
                    plan.nulled_by_row.setdefault((section.name, key), []).extend(nulled_names)
        else:
            rows = {}
            for values, nulled_names in entries:
                when: datetime = values[when_at]
                if by_gpu:
                    owner_id = gpu_ids.get(values[0])
                    values = values[1:]
                else:
                    owner_id = node.id
                reason = _rejection(owner_id, when, newest_allowed, oldest_allowed)
                if reason is not None:
                    plan.rejected[f"{section.name}.{reason}"] += 1
                    continue
                row = (owner_id, *values)
                key = keyer(row)
                # A repeated entry is judged (its nulled values counted) before it is skipped.
                if nulled_names:
                    plan.nulled_by_row.setdefault((section.name, key), []).extend(nulled_names)
                rows.setdefault(key, row)
        plan.rows[section.name] = rows
        plan.staged[section.name] = sinks.staged(section.name, columns, list(rows.values()))
    return plan


def keys_by_section(plan: SectionsPlan) -> dict[str, Collection[tuple[Any, ...]]]:
    """Section name → the keys of the rows planned for it."""
    return {name: rows.keys() for name, rows in plan.rows.items()}


def drop_packed(
    plan: SectionsPlan, packed: Mapping[str, Collection[tuple[Any, ...]]], nulled: Counter[str]
) -> None:
    """Leave out of ``plan`` the rows whose key is in ``packed`` (by section: stored in a
    packed block already, a reading re-sent after its block was packed;
    :func:`app.series.sinks.packed`), then count the nulled values of the rows left into
    ``nulled``."""
    for name, rows in plan.rows.items():
        gone = packed.get(name, ())
        if gone:
            for key in gone:
                del rows[key]
            plan.staged[name] = sinks.restaged(plan.staged[name], list(rows.values()))
    for (name, key), names in plan.nulled_by_row.items():
        if key in plan.rows[name]:
            nulled.update(names)


def _plain_rows(
    entries: list[SectionRow],
    keyer: Callable[[tuple[Any, ...]], tuple[Any, ...]],
    when_at: int,
    gpu_ids: dict[str, int] | None,
    node_id: int,
    newest_allowed: datetime,
    oldest_allowed: datetime,
) -> dict[tuple[Any, ...], tuple[Any, ...]] | None:
    """A section's rows by key, in entry order, where none is rejected and no key repeats (the
    usual batch), built with C-level passes; ``None`` otherwise, for the loop to sort out.
    ``gpu_ids``: UUID → id for a GPU-owned section (its entries start with the UUID)."""
    whens = [values[when_at] for values, _ in entries]
    if whens and not (oldest_allowed <= min(whens) and max(whens) <= newest_allowed):
        return None
    rows: list[tuple[Any, ...]]
    if gpu_ids is not None:
        owners = [gpu_ids.get(values[0]) for values, _ in entries]
        if None in owners:
            return None
        rows = [(owner, *values[1:]) for owner, (values, _) in zip(owners, entries, strict=True)]
    else:
        rows = [(node_id, *values) for values, _ in entries]
    keyed = dict(zip(map(keyer, rows), rows, strict=True))
    return keyed if len(keyed) == len(rows) else None


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

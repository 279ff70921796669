"""Recording and reading node topologies.

A topology is stored once per distinct document (``topology_snapshot``, digest unique per node);
each time a node reports a topology that differs from its current one, a ``topology_change`` row
says so. The hourly re-send of an unchanged topology stores nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.fleet.models import Node
from app.metrics.plausible import clean_numbers
from app.series.writes import insert_ignoring_conflicts
from app.topology.models import TopologyChange, TopologySnapshot
from app.topology.schemas import DEVICE_BOUNDS, TopologyIn

MAX_CHANGES_LISTED = 500


def topology_document(topology: TopologyIn, *, nulled: Counter[str]) -> tuple[dict[str, Any], int]:
    """The document stored for ``topology`` and how many of its links were dropped.

    The document is the JSON form (unknown fields dropped, ``SOC`` read as ``SYS``) with
    implausible device numbers nulled and counted in ``nulled``. A link naming a device that is
    not in ``devices`` is dropped and the topology marked partial, with the reason in ``errors``:
    the agent merges the GPU part and the NIC part, and a GPU the driver lost is missing from the
    first while its PCIe distance to a NIC is still in the second.
    """
    document = topology.model_dump(mode="json")
    document["devices"] = [
        clean_numbers(device, DEVICE_BOUNDS, prefix="topology.devices", nulled=nulled)
        for device in document["devices"]
    ]
    ids = {device["id"] for device in document["devices"]}
    kept = [link for link in document["links"] if link["a"] in ids and link["b"] in ids]
    dropped = len(document["links"]) - len(kept)
    if dropped:
        missing = sorted(
            {end for link in document["links"] for end in (link["a"], link["b"])} - ids
        )
        document["links"] = kept
        document["partial"] = True
        document["errors"] = [
            *document["errors"],
            f"{dropped} link(s) name no device of this topology: {', '.join(missing)}",
        ]
    return document, dropped


def digest(document: dict[str, Any]) -> str:
    """SHA-256 (hex) of ``document`` without ``collected_at``, keys sorted: equal for two
    reports of an unchanged machine."""
    body = {k: v for k, v in document.items() if k != "collected_at"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def latest_change(session: Session, *, node_id: int) -> TopologyChange | None:
    """The node's newest topology change (its current topology), or None."""
    return session.scalars(
        select(TopologyChange)
        .where(TopologyChange.node_id == node_id)
        .order_by(TopologyChange.received_at.desc(), TopologyChange.id.desc())
        .limit(1)
    ).first()


def record_topology(
    session: Session,
    *,
    node: Node,
    topology: TopologyIn,
    received_at: datetime,
    nulled: Counter[str],
    rejected: Counter[str],
) -> bool:
    """Record ``topology`` as reported by ``node``; returns whether it is a change (the node's
    first topology, or one that differs from its current one). Links naming no device are
    counted in ``rejected`` as ``topology.links.unknown_device``."""
    document, dropped = topology_document(topology, nulled=nulled)
    if dropped:
        rejected["topology.links.unknown_device"] += dropped
    key = digest(document)
    current = latest_change(session, node_id=node.id)
    if current is not None and current.snapshot.digest == key:
        return False
    insert_ignoring_conflicts(
        session,
        TopologySnapshot.__table__,  # type: ignore[arg-type]
        [
            {
                "node_id": node.id,
                "collected_at": topology.collected_at,
                "received_at": received_at,
                "digest": key,
                "partial": document["partial"],
                "source": topology.source,
                "document": document,
            }
        ],
        key=("node_id", "digest"),
    )
    snapshot_id = session.scalars(
        select(TopologySnapshot.id).where(
            TopologySnapshot.node_id == node.id, TopologySnapshot.digest == key
        )
    ).one()
    session.add(
        TopologyChange(
            node_id=node.id,
            snapshot_id=snapshot_id,
            collected_at=topology.collected_at,
            received_at=received_at,
        )
    )
    session.flush()
    return True


@dataclass
class TopologyHistory:
    """A node's current topology (``latest``, None before the first report) and its changes,
    newest first."""

    latest: TopologyChange | None
    changes: list[TopologyChange]


def get_history(
    session: Session, *, node_id: int, limit: int = MAX_CHANGES_LISTED
) -> TopologyHistory:
    """The node's topology changes (at most ``limit``, newest first), each with its snapshot."""
    changes = list(
        session.scalars(
            select(TopologyChange)
            .where(TopologyChange.node_id == node_id)
            .order_by(TopologyChange.received_at.desc(), TopologyChange.id.desc())
            .limit(limit)
        )
    )
    return TopologyHistory(latest=changes[0] if changes else None, changes=changes)


@dataclass(frozen=True)
class ChangeSummary:
    """A topology change as an incident lists it: when the node's topology became this one,
    its GPU and link counts, and whether it was partial (a GPU could not be read)."""

    collected_at: datetime
    gpus: int
    links: int
    partial: bool


def changes_between(
    session: Session, *, node_id: int, since: datetime, until: datetime
) -> list[ChangeSummary]:
    """The node's topology changes collected within ``[since, until]``, oldest first."""
    changes = session.scalars(
        select(TopologyChange)
        .where(
            TopologyChange.node_id == node_id,
            TopologyChange.collected_at >= since,
            TopologyChange.collected_at <= until,
        )
        .order_by(TopologyChange.collected_at, TopologyChange.id)
    )
    out = []
    for change in changes:
        document = change.snapshot.document or {}
        devices = document.get("devices") or []
        gpus = sum(1 for d in devices if isinstance(d, dict) and d.get("kind") == "gpu")
        links = len(document.get("links") or [])
        out.append(ChangeSummary(change.collected_at, gpus, links, change.snapshot.partial))
    return out

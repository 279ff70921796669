"""``GET /api/v1/nodes/{hostname}/topology``: the node's current topology and its changes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.db import SessionDep
from app.fleet import service as fleet_service
from app.topology import service as topology_service
from app.topology.models import TopologyChange
from app.topology.schemas import TopologyChangeOut, TopologyOut, TopologySnapshotOut

router = APIRouter(prefix="/api/v1", tags=["topology"])


def _change_out(change: TopologyChange, *, with_document: bool) -> TopologyChangeOut:
    snapshot = change.snapshot
    return TopologyChangeOut(
        received_at=change.received_at,
        collected_at=change.collected_at,
        digest=snapshot.digest,
        partial=snapshot.partial,
        source=snapshot.source,
        document=snapshot.document if with_document else None,
    )


@router.get(
    "/nodes/{hostname}/topology",
    response_model=TopologyOut,
    summary="The node's topology (nvidia-smi topo -m) and when it changed",
)
def get_topology(
    session: SessionDep,
    hostname: str,
    history: Annotated[
        bool, Query(description="include each change's full topology document")
    ] = False,
) -> TopologyOut:
    """The current topology snapshot (null before the node sent one) and every change, newest
    first, as times and digests, or with their documents when ``history=1``. 404 for an
    unknown node."""
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    found = topology_service.get_history(session, node_id=node.id)
    latest = None
    if found.latest is not None:
        snapshot = found.latest.snapshot
        latest = TopologySnapshotOut(
            received_at=found.latest.received_at,
            collected_at=found.latest.collected_at,
            first_received_at=snapshot.received_at,
            digest=snapshot.digest,
            partial=snapshot.partial,
            source=snapshot.source,
            document=snapshot.document,
        )
    return TopologyOut(
        hostname=node.hostname,
        latest=latest,
        changes=[_change_out(c, with_document=history) for c in found.changes],
    )

"""``GET /api/v1/nodes/{hostname}/nics``: the node's InfiniBand/RoCE ports."""

from __future__ import annotations

from fastapi import APIRouter

from app.db import SessionDep
from app.fleet import service as fleet_service
from app.nics import service as nic_service
from app.nics.schemas import NicPortOut, NicsOut

router = APIRouter(prefix="/api/v1", tags=["nics"])


@router.get(
    "/nodes/{hostname}/nics",
    response_model=NicsOut,
    summary="The newest reading of the node's NIC ports",
)
def get_nics(session: SessionDep, hostname: str) -> NicsOut:
    """Each port's state, physical state, rate, traffic and error counters as last reported (a
    port not reported for 10 minutes is gone). 404 for an unknown node."""
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    ports = nic_service.list_latest_ports(session, node_id=node.id)
    return NicsOut(hostname=node.hostname, nic_ports=[NicPortOut.model_validate(p) for p in ports])

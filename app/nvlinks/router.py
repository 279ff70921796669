"""``GET /api/v1/nodes/{hostname}/nvlinks``: the node's GPU links."""

from __future__ import annotations

from fastapi import APIRouter

from app.db import SessionDep
from app.fleet import service as fleet_service
from app.nvlinks import service as nvlink_service
from app.nvlinks.schemas import NvlinkOut, NvlinksOut

router = APIRouter(prefix="/api/v1", tags=["nvlinks"])


@router.get(
    "/nodes/{hostname}/nvlinks",
    response_model=NvlinksOut,
    summary="The newest reading of every NVLink of the node's GPUs",
)
def get_nvlinks(session: SessionDep, hostname: str) -> NvlinksOut:
    """Each GPU link's state, speed, remote end, traffic and cumulative error counters, by GPU
    index and link number. 404 for an unknown node."""
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    gpus = {g.id: g for g in node.gpus}
    links = nvlink_service.list_latest_links(session, gpus=list(gpus.values()))
    return NvlinksOut(
        hostname=node.hostname,
        nvlinks=[
            NvlinkOut(
                gpu_uuid=gpus[link.gpu_id].uuid,
                gpu_index=gpus[link.gpu_id].index,
                link=link.link,
                sampled_at=link.sampled_at,
                state=link.state,
                speed_gbps=link.speed_gbps,
                remote_pci_bus_id=link.remote_pci_bus_id,
                remote_device_type=link.remote_device_type,
                tx_bytes_per_s=link.tx_bytes_per_s,
                rx_bytes_per_s=link.rx_bytes_per_s,
                crc_errors=link.crc_errors,
                replay_errors=link.replay_errors,
                recovery_errors=link.recovery_errors,
            )
            for link in links
        ],
    )

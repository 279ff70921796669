"""``GET /api/v1/nodes/{hostname}/storage``: the node's disks, mounts and NFS mounts."""

from __future__ import annotations

from fastapi import APIRouter

from app.db import SessionDep
from app.fleet import service as fleet_service
from app.storage import service as storage_service
from app.storage.schemas import DiskOut, MountOut, NfsMountOut, StorageOut

router = APIRouter(prefix="/api/v1", tags=["storage"])


@router.get(
    "/nodes/{hostname}/storage",
    response_model=StorageOut,
    summary="The newest reading of the node's disks, mounts and NFS mounts",
)
def get_storage(session: SessionDep, hostname: str) -> StorageOut:
    """Each block device's rates, each filesystem's usage and each NFS mount's counters and
    rates, as last reported (a device not reported for 10 minutes is gone). 404 for an unknown
    node."""
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    storage = storage_service.get_node_storage(session, node_id=node.id)
    return StorageOut(
        hostname=node.hostname,
        disks=[DiskOut.model_validate(d) for d in storage.disks],
        mounts=[MountOut.model_validate(m) for m in storage.mounts],
        nfs_mounts=[NfsMountOut.model_validate(m) for m in storage.nfs_mounts],
    )

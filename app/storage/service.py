"""Reading node storage: the newest reading of every disk, mount and NFS mount."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.storage.models import DiskSample, MountSample, NfsSample
from app.timeseries import latest_per_key, natural_key


@dataclass
class NodeStorage:
    """The newest reading of each disk (by device), mount and NFS mount (by mountpoint)."""

    disks: list[DiskSample]
    mounts: list[MountSample]
    nfs_mounts: list[NfsSample]

    @property
    def empty(self) -> bool:
        """True when the node reported no storage at all (an agent before 0.2)."""
        return not (self.disks or self.mounts or self.nfs_mounts)


def get_node_storage(session: Session, *, node_id: int) -> NodeStorage:
    """The node's current disks, mounts and NFS mounts."""
    disks = latest_per_key(
        session,
        DiskSample,
        owner=DiskSample.node_id,
        owner_ids=[node_id],
        keys=[DiskSample.device],
    )
    mounts = latest_per_key(
        session,
        MountSample,
        owner=MountSample.node_id,
        owner_ids=[node_id],
        keys=[MountSample.mountpoint],
    )
    nfs = latest_per_key(
        session,
        NfsSample,
        owner=NfsSample.node_id,
        owner_ids=[node_id],
        keys=[NfsSample.mountpoint],
    )
    return NodeStorage(
        disks=sorted(disks, key=lambda d: natural_key(d.device)),
        mounts=sorted(mounts, key=lambda m: m.mountpoint),
        nfs_mounts=sorted(nfs, key=lambda m: m.mountpoint),
    )

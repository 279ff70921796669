"""Reading node storage: the newest reading of every disk, mount and NFS mount."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.series import readings
from app.series.readings import DiskReading, MountReading, NfsReading
from app.series.writes import LATEST_WINDOW_S


@dataclass
class NodeStorage:
    """The newest reading of each disk (by device), mount and NFS mount (by mountpoint)."""

    disks: list[DiskReading]
    mounts: list[MountReading]
    nfs_mounts: list[NfsReading]

    @property
    def empty(self) -> bool:
        """True when the node reported no storage at all (an agent before 0.2)."""
        return not (self.disks or self.mounts or self.nfs_mounts)


def get_node_storage(session: Session, *, node_id: int) -> NodeStorage:
    """The node's current disks, mounts and NFS mounts (:mod:`app.series.readings`)."""
    return NodeStorage(
        disks=readings.disks(session, node_id, window_s=LATEST_WINDOW_S),
        mounts=readings.mounts(session, node_id, window_s=LATEST_WINDOW_S),
        nfs_mounts=readings.nfs_mounts(session, node_id, window_s=LATEST_WINDOW_S),
    )

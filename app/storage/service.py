"""Reading node storage: the newest reading of every disk, mount and NFS mount."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.orm import Session

from app.series import latest
from app.storage.models import DiskSample, MountSample, NfsSample
from app.timeseries import LATEST_WINDOW_S, natural_key

Reading = TypeVar("Reading", DiskSample, MountSample, NfsSample)


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
    """The node's current disks, mounts and NFS mounts (:mod:`app.series.latest`), as
    detached model objects."""

    def current(spec: latest.LatestSpec, model: type[Reading]) -> list[Reading]:
        rows = latest.of_node(session, spec, node_id, window_s=LATEST_WINDOW_S)
        return [model(**row._mapping) for row in rows]

    disks = current(latest.DISK, DiskSample)
    mounts = current(latest.MOUNT, MountSample)
    nfs = current(latest.NFS, NfsSample)
    return NodeStorage(
        disks=sorted(disks, key=lambda d: natural_key(d.device)),
        mounts=sorted(mounts, key=lambda m: m.mountpoint),
        nfs_mounts=sorted(nfs, key=lambda m: m.mountpoint),
    )

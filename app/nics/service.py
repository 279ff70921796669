"""Reading NIC ports: the newest reading of every port of a node."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.nics.models import NicPortSample
from app.timeseries import latest_per_key, natural_key

#: sysfs ``state`` words of a port that carries traffic.
ACTIVE_STATES = frozenset({"ACTIVE"})


def list_latest_ports(session: Session, *, node_id: int) -> list[NicPortSample]:
    """The newest reading of each (device, port) of the node, ordered by device and port
    (``mlx5_2`` before ``mlx5_10``)."""
    ports = latest_per_key(
        session,
        NicPortSample,
        owner=NicPortSample.node_id,
        owner_ids=[node_id],
        keys=[NicPortSample.device, NicPortSample.port],
    )
    return sorted(ports, key=lambda p: (natural_key(p.device), p.port))


def is_active(port: NicPortSample) -> bool:
    """Whether the port's state is ``ACTIVE`` (case-insensitive)."""
    return (port.state or "").upper() in ACTIVE_STATES

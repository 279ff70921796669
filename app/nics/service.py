"""Reading NIC ports: the newest reading of every port of a node."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.series import readings
from app.series.readings import NicPortReading
from app.series.writes import LATEST_WINDOW_S

#: sysfs ``state`` words of a port that carries traffic.
ACTIVE_STATES = frozenset({"ACTIVE"})


def list_latest_ports(session: Session, *, node_id: int) -> list[NicPortReading]:
    """The current reading of each (device, port) of the node
    (:func:`app.series.readings.nic_ports`), ordered by device and port (``mlx5_2`` before
    ``mlx5_10``)."""
    return readings.nic_ports(session, node_id, window_s=LATEST_WINDOW_S)


def is_active(port: NicPortReading) -> bool:
    """Whether the port's state is ``ACTIVE`` (case-insensitive)."""
    return (port.state or "").upper() in ACTIVE_STATES

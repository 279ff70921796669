"""Reading NIC ports: the newest reading of every port of a node."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.nics.models import NicPortSample
from app.series import latest
from app.timeseries import LATEST_WINDOW_S, natural_key

#: sysfs ``state`` words of a port that carries traffic.
ACTIVE_STATES = frozenset({"ACTIVE"})


def list_latest_ports(session: Session, *, node_id: int) -> list[NicPortSample]:
    """The current reading (:mod:`app.series.latest`) of each (device, port) of the node, as
    detached model objects, ordered by device and port (``mlx5_2`` before ``mlx5_10``)."""
    rows = latest.of_node(session, latest.NIC, node_id, window_s=LATEST_WINDOW_S)
    ports = [NicPortSample(**row._mapping) for row in rows]
    return sorted(ports, key=lambda p: (natural_key(p.device), p.port))


def is_active(port: NicPortSample) -> bool:
    """Whether the port's state is ``ACTIVE`` (case-insensitive)."""
    return (port.state or "").upper() in ACTIVE_STATES

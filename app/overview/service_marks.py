"""Which nodes of the overview are out of service (:mod:`app.lifecycle`) or in a maintenance
window (:mod:`app.maintenance`) now: a mark on their tile, and the overview's ``service``
filter."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.lifecycle import service as lifecycle
from app.lifecycle import states
from app.lifecycle.service import OutOfService
from app.maintenance import service as maintenance

#: A tile's badge per lifecycle state (``M``: in maintenance, in service).
GLYPHS: dict[str, str] = {
    states.QUARANTINED: "Q",
    states.REMEDIATING: "R",
    states.VALIDATING: "V",
    states.RMA: "RMA",
}
MAINTENANCE_GLYPH = "M"
_LABELS: dict[str, str] = {str(k): v for k, v in states.LABELS.items()}


@dataclass(frozen=True)
class ServiceMark:
    """A node not simply in service: ``lifecycle`` its state (``in_service`` when only in
    maintenance), ``maintenance`` whether a window covers it; ``glyph`` and ``title`` for its
    tile (``Quarantined since … : reason · in maintenance until …: reason``)."""

    lifecycle: str
    maintenance: bool
    glyph: str
    title: str

    @property
    def css(self) -> str:
        """``svc-out`` (out of service, maintenance or not) or ``svc-maintenance``."""
        return "svc-out" if self.lifecycle != states.IN_SERVICE else "svc-maintenance"


def service_marks(
    session: Session, *, now: datetime, out: list[OutOfService] | None = None
) -> dict[str, ServiceMark]:
    """Hostname → mark, for the nodes out of service or in maintenance at ``now``; ``out``:
    :func:`app.lifecycle.service.out_of_service_nodes` when the caller read it already."""
    out = lifecycle.out_of_service_nodes(session) if out is None else out
    windows = maintenance.hosts_in_maintenance(session, now=now)
    marks: dict[str, ServiceMark] = {}
    for n in out:
        window = windows.get(n.hostname)
        title = (
            f"{_LABELS.get(n.state, n.state)} since "
            f"{n.since.isoformat(timespec='seconds')}: {n.reason}"
        )
        if window is not None:
            title += f" · in maintenance until {_at(window.ends_at)}: {window.reason}"
        glyph = GLYPHS.get(n.state, "?") + ("+" + MAINTENANCE_GLYPH if window else "")
        marks[n.hostname] = ServiceMark(n.state, window is not None, glyph, title)
    for host, window in windows.items():
        if host not in marks:
            marks[host] = ServiceMark(
                states.IN_SERVICE,
                True,
                MAINTENANCE_GLYPH,
                f"In maintenance until {_at(window.ends_at)}: {window.reason}",
            )
    return marks


def _at(when: datetime) -> str:
    return when.isoformat(timespec="seconds")


def in_service_state(mark: ServiceMark | None, wanted: str) -> bool:
    """Whether a node with ``mark`` (None: in service, no window) is in the overview's
    ``service`` filter value ``wanted``: ``in`` (in service, no window), ``out`` (out of
    service) or ``maintenance`` (a window covers it)."""
    if wanted == "in":
        return mark is None
    if wanted == "out":
        return mark is not None and mark.lifecycle != states.IN_SERVICE
    return mark is not None and mark.maintenance

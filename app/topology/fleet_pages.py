"""The fleet topology page (``/topology``): groups with their majority signature and the nodes
that drift from it, and the htmx partial that refreshes it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.db import SessionDep, utcnow
from app.errors import BadRequest
from app.topology import drift_state
from app.topology.drift import KINDS, DriftFinding
from app.topology.fleet_drift import FleetDrift as FleetDrift  # re-exported
from app.web import render

router = APIRouter(include_in_schema=False)

#: How each finding kind is named on the page.
KIND_TITLES = {
    "partial": "Partial topology",
    "gpu_missing": "GPU missing",
    "gpu_extra": "Extra GPU",
    "nic_missing": "NIC missing",
    "nic_extra": "Extra NIC",
    "nvlink_fewer": "Fewer NVLinks",
    "link_type": "Different link type",
    "numa": "Different NUMA node",
    "nvlink_count": "Different NVLink count",
    "nic_down": "NIC port down",
    "nic_state": "Different NIC port state",
    "pcie_downtrained": "PCIe below maximum",
    "no_majority": "No majority",
}
MAX_GROUP_CHARS = 512


@dataclass(frozen=True)
class DriftFilters:
    """The drift list's filters from the URL: ``group`` (exact group name) and ``kind`` (one of
    :data:`app.topology.drift.KINDS`); empty means all."""

    group: str = ""
    kind: str = ""

    @classmethod
    def parse(cls, group: str | None, kind: str | None) -> DriftFilters:
        """Read the query parameters.

        Raises:
            BadRequest: ``kind`` is not a finding kind, or ``group`` is over 512 characters.
        """
        kind = (kind or "").strip()
        if kind and kind not in KINDS:
            raise BadRequest(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
        group = (group or "").strip()
        if len(group) > MAX_GROUP_CHARS:
            raise BadRequest(f"group: longer than {MAX_GROUP_CHARS} characters")
        return cls(group=group, kind=kind)

    def query(self) -> str:
        """``?group=…&kind=…`` of the filters that are set; empty when none is."""
        params = [(k, v) for k, v in (("group", self.group), ("kind", self.kind)) if v]
        return "?" + urlencode(params) if params else ""

    def keep(self, finding: DriftFinding) -> bool:
        """Whether ``finding`` passes the filters."""
        return (not self.group or finding.group == self.group) and (
            not self.kind or finding.kind == self.kind
        )


def fleet_drift(session: Session, *, now: datetime, stale_after_s: float = 0.0) -> FleetDrift:
    """The fleet's drift: the one stored by the background job when younger than
    ``stale_after_s`` (:func:`app.topology.drift_state.current_drift`), else computed now."""
    return drift_state.current_drift(session, now=now, stale_after_s=stale_after_s)


def _context(request: Request, session: Session, filters: DriftFilters) -> dict[str, Any]:
    settings = request.app.state.settings
    drift = fleet_drift(session, now=utcnow(), stale_after_s=settings.drift_stale_after_s)
    return {
        "drift": drift,
        "filters": filters,
        "shown": [f for f in drift.findings if filters.keep(f)],
        "kind_titles": KIND_TITLES,
        "now": drift.at,
        "nav": "topology",
    }


@router.get("/topology", response_class=HTMLResponse)
def topology_page(
    request: Request, session: SessionDep, group: str | None = None, kind: str | None = None
) -> HTMLResponse:
    """Nodes grouped by fabric with each group's majority signature, and the drift list
    filtered by ``group`` and ``kind``. 400 page for an unknown kind."""
    filters = DriftFilters.parse(group, kind)
    return render(request, "topology/fleet.html", _context(request, session, filters))


@router.get("/topology/_drift", response_class=HTMLResponse)
def topology_drift_partial(
    request: Request,
    session: SessionDep,
    group: str | None = None,
    kind: str | None = None,
    push: str | None = None,
) -> HTMLResponse:
    """The groups and drift list alone, for the htmx refresh and the filter form; with
    ``push=1`` the browser's URL becomes the page URL of the new filters."""
    filters = DriftFilters.parse(group, kind)
    response = render(request, "topology/_fleet_live.html", _context(request, session, filters))
    if push == "1":
        response.headers["HX-Push-Url"] = "/topology" + filters.query()
    return response

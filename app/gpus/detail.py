"""Everything the GPU page and its JSON show, gathered once: the node, the GPU, its health
(picked from the node's evaluation), its NVLinks and its events over the chosen window."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.events.models import NodeEvent
from app.fleet import service as fleet_service
from app.fleet.service import GpuView, NodeView
from app.gpus import service as gpu_service
from app.health import service as health_service
from app.health.rules import HealthRules
from app.health.schemas import GpuHealthOut, NodeHealthOut, ReasonOut
from app.nvlinks import service as nvlink_service
from app.series.readings import NvlinkReading


@dataclass
class GpuDetail:
    """One GPU with its node (``view``), the node's health (``node_health``, whose entry for this
    GPU is ``health``), the newest reading of each of its NVLinks and its events in the window."""

    view: NodeView
    gpu: GpuView
    node_health: NodeHealthOut
    health: GpuHealthOut
    links: list[NvlinkReading]
    events: list[NodeEvent]

    @property
    def node_reasons(self) -> list[ReasonOut]:
        """The node's reasons not tied to any GPU (stale, an IB port down, slow storage …)."""
        return [r for r in self.node_health.reasons if r.gpu_index is None]

    @property
    def peers(self) -> dict[str, GpuView]:
        """The node's other GPUs by lower-case PCI bus id, to name an NVLink's GPU peer."""
        return {
            g.gpu.pci_bus_id.lower(): g
            for g in self.view.gpus
            if g.gpu.pci_bus_id and g.gpu.id != self.gpu.gpu.id
        }


def get_gpu_detail(
    session: Session,
    *,
    hostname: str,
    key: str,
    rules: HealthRules,
    start: datetime,
    end: datetime,
    now: datetime,
) -> GpuDetail:
    """The GPU ``key`` (index or UUID) of node ``hostname``, with events in ``[start, end]``.

    Raises:
        NotFound: no such node, or no such GPU on it.
    """
    view = fleet_service.get_node_view(
        session, hostname=hostname, stale_after_s=rules.stale_after_s, now=now
    )
    chosen = gpu_service.resolve_gpu(view, key=key)
    node_health = health_service.evaluate_node(session, view=view, rules=rules, now=now)
    health = next(h for h in node_health.gpus if h.uuid == chosen.gpu.uuid)
    return GpuDetail(
        view=view,
        gpu=chosen,
        node_health=node_health,
        health=health,
        links=nvlink_service.list_latest_links(session, gpus=[chosen.gpu]),
        events=gpu_service.list_gpu_events(session, gpu=chosen.gpu, start=start, end=end),
    )

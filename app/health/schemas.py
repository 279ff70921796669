"""Pydantic models of the health API: reasons, GPU and node health, and the rollups."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from app.health.rules import State


class ActionOut(BaseModel):
    """The suggested repair of a finding (:mod:`app.health.actions`)."""

    code: str = Field(
        description="watch, restart_app, investigate, check_agent, check_cooling, check_power, "
        "check_storage, check_fabric, reset_gpu, reboot_node or inspect_hardware"
    )
    title: str
    text: str
    source: str = Field(description="e.g. 'NVIDIA Xid catalog: RESET_GPU', or 'Fleetwatch'")
    escalated_from: str | None = Field(
        default=None, description="the action repeated occurrences escalated from"
    )
    occurrences: int | None = Field(
        default=None, description="bursts of this finding on this GPU in the escalation window"
    )


class ReasonOut(BaseModel):
    """Why a GPU or node is not healthy (or not known to be)."""

    state: State
    code: str = Field(description="e.g. xid_79, gpu_lost, nvlink_down, stale")
    text: str
    since: datetime | None = Field(description="when the condition was first seen, if known")
    evidence: str = Field(description="page link where the evidence is shown")
    gpu_index: int | None = None
    action: ActionOut | None = Field(default=None, description="the suggested repair")
    test: bool = Field(
        default=False,
        description="found only from self-test events (fleetwatch-agent --inject-test-xid): "
        "not a real fault",
    )


class GpuHealthOut(BaseModel):
    """One GPU's health."""

    index: int
    uuid: str
    name: str | None
    state: State
    reasons: list[ReasonOut]


class StateCounts(BaseModel):
    """How many members are in each state, and the worst of them."""

    healthy: int = 0
    degraded: int = 0
    unhealthy: int = 0
    unknown: int = 0
    worst: State = State.HEALTHY

    @property
    def total(self) -> int:
        """Members counted."""
        return self.healthy + self.degraded + self.unhealthy + self.unknown


class NodeHealthOut(BaseModel):
    """A node's health: the worst of its GPUs' and its own reasons (Unknown when stale)."""

    hostname: str
    state: State
    cluster: str
    group: str
    reasons: list[ReasonOut]
    gpus: list[GpuHealthOut] = []
    gpu_counts: StateCounts


class GroupHealthOut(BaseModel):
    """An IB pod (``ib_pod`` label), else a rack (``rack``), else ``ungrouped``, of a cluster."""

    cluster: str
    kind: str = Field(description="ib_pod, rack or none")
    name: str
    counts: StateCounts


class ClusterHealthOut(BaseModel):
    """A cluster (``cluster`` label; ``unlabelled`` without one)."""

    name: str
    counts: StateCounts


class HealthOut(BaseModel):
    """``GET /api/v1/health``: node counts fleet-wide, per cluster and group, and each node."""

    evaluated_at: datetime
    counts: StateCounts
    clusters: list[ClusterHealthOut]
    groups: list[GroupHealthOut]
    nodes: list[NodeHealthOut]

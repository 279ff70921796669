"""Response models of the read API (``/api/v1/nodes…``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.fleet.retire import checked_reason
from app.fleet.service import GpuView, NodeView


class GpuOut(BaseModel):
    """A GPU and its newest stored values (``latest``: metric → value, null = not available);
    ``unavailable`` says why a metric is null (NVML return code name; ``NOT_SUPPORTED``: the
    card cannot report it), ``implausible`` which metrics of the newest sample the server
    dropped as implausible (metric → ``sampled_at``), ``implausible_inventory`` which fields of
    the latest inventory it left out (field → the value sent, as JSON text); ``mig_instances``
    and ``processes`` are as of the latest batch (null: not reported)."""

    uuid: str
    index: int
    name: str | None
    pci_bus_id: str | None
    mem_total_bytes: int | None
    mig_mode: str | None
    state: str
    state_reason: str | None
    last_sample_at: datetime | None
    latest: dict[str, Any]
    unavailable: dict[str, str] | None = None
    implausible: dict[str, str] | None = None
    implausible_inventory: dict[str, str] | None = None
    mig_instances: list[dict[str, Any]] | None = None
    processes: list[dict[str, Any]] | None = None

    @classmethod
    def from_view(cls, view: GpuView) -> GpuOut:
        """Build from a :class:`app.fleet.service.GpuView`."""
        g = view.gpu
        return cls(
            uuid=g.uuid,
            index=g.index,
            name=g.name,
            pci_bus_id=g.pci_bus_id,
            mem_total_bytes=g.mem_total_bytes,
            mig_mode=g.mig_mode,
            state=g.state,
            state_reason=g.state_reason,
            last_sample_at=view.latest_at,
            latest=view.latest,
            unavailable=g.unavailable,
            implausible=g.implausible,
            implausible_inventory=g.implausible_inventory,
            mig_instances=g.mig_instances,
            processes=g.processes,
        )


class NodeSummaryOut(BaseModel):
    """A node as listed by ``GET /api/v1/nodes``."""

    hostname: str
    labels: dict[str, Any]
    freshness: Literal["fresh", "stale", "never_seen"]
    gpu_count: int
    gpus_not_ok: int
    last_sample_at: datetime | None
    last_seen_at: datetime | None
    clock_skew_s: float | None
    agent_version: str | None
    mean_util_gpu_pct: float | None
    max_temp_c: float | None

    @classmethod
    def from_view(cls, view: NodeView) -> NodeSummaryOut:
        """Build from a :class:`app.fleet.service.NodeView`."""
        n = view.node
        return cls(
            hostname=n.hostname,
            labels=n.labels,
            freshness=view.freshness,
            gpu_count=view.gpu_count,
            gpus_not_ok=view.lost_gpu_count,
            last_sample_at=n.last_sample_at,
            last_seen_at=n.last_seen_at,
            clock_skew_s=n.clock_skew_s,
            agent_version=n.agent_version,
            mean_util_gpu_pct=view.mean_util_gpu_pct,
            max_temp_c=view.max_temp_c,
        )


class NodeDetailOut(NodeSummaryOut):
    """A node with versions and its GPUs (``GET /api/v1/nodes/{hostname}``); ``collector`` and
    ``collection_errors`` are those of the latest batch that reported them."""

    driver_version: str | None
    cuda_version: str | None
    first_seen_at: datetime | None
    collector: str | None = None
    collection_errors: list[dict[str, Any]] | None = None
    retired_at: datetime | None = None
    retired_reason: str | None = None
    expected_gpu_count: int | None = Field(
        default=None, description="GPUs the node should have, as its agent says (PCI count)"
    )
    gpus: list[GpuOut]

    @classmethod
    def from_view(cls, view: NodeView) -> NodeDetailOut:
        """Build from a :class:`app.fleet.service.NodeView`."""
        n = view.node
        return cls(
            **NodeSummaryOut.from_view(view).model_dump(),
            driver_version=n.driver_version,
            cuda_version=n.cuda_version,
            first_seen_at=n.first_seen_at,
            collector=n.collector,
            collection_errors=n.collection_errors,
            retired_at=n.retired_at,
            retired_reason=n.retired_reason,
            expected_gpu_count=n.expected_gpu_count,
            gpus=[GpuOut.from_view(g) for g in view.gpus],
        )


class RetireIn(BaseModel):
    """``POST /api/v1/nodes/{hostname}/retire`` body."""

    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, AfterValidator(checked_reason)] = Field(
        min_length=1, max_length=1024, description="why (decommissioned, replaced, renamed …)"
    )


class NodeRetiredOut(BaseModel):
    """A node's place in the fleet after a retire or return."""

    hostname: str
    retired_at: datetime | None
    retired_reason: str | None
    tokens_revoked: int = 0


class SeriesOut(BaseModel):
    """One GPU's series: ``t`` (bucket start or sample time, UTC) and aligned ``values``."""

    gpu_uuid: str
    gpu_index: int
    gpu_name: str | None
    t: list[datetime]
    values: dict[str, list[float | int | None]]


class SamplesOut(BaseModel):
    """``GET /api/v1/nodes/{hostname}/samples``: the range, the step (0 = raw) and the series."""

    hostname: str
    start: datetime
    end: datetime
    step_s: int
    metrics: list[str]
    series: list[SeriesOut]

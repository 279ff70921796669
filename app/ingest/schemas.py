"""Pydantic models of the ingest payload, schema version 1 (see ``docs/ingest.md``).

Metric fields are generated from :data:`app.metrics.catalog.METRICS`, so the payload, the table
and the docs cannot drift apart. Metric values are strict numbers (``bool`` and strings are
refused with 422); plausibility is judged later by :func:`app.metrics.catalog.sanitize`, so an
implausible value never fails a batch. The bounds of the inventory and node-section models are
tight on purpose: a value outside them is left out alone by :mod:`app.ingest.salvage`, never
refusing the batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    create_model,
    field_validator,
)

from app.ingest.fields import BusId, GpuUuid, LabelValue, Message, Text64, Text256, Text1024
from app.ingest.gpu_schemas import MAX_MIG_INSTANCES, MAX_PROCESSES, MigInstanceIn, ProcessIn
from app.metrics.catalog import METRICS
from app.metrics.plausible import Number, Timestamp
from app.nics.schemas import MAX_NIC_PORTS, NicPortIn
from app.nvlinks.schemas import MAX_NVLINKS, NvlinkIn
from app.storage.schemas import MAX_DISKS, MAX_MOUNTS, MAX_NFS_MOUNTS, DiskIn, MountIn, NfsMountIn
from app.topology.schemas import TopologyIn

SCHEMA_VERSION = 1


def _exact_int(value: Any) -> Any:
    """``schema_version`` must be the JSON integer 1: not ``true``, not ``1.0``."""
    if type(value) is not int:
        raise ValueError("must be the integer 1")
    return value


MAX_SAMPLES = 100_000
MAX_EVENTS = 10_000
MAX_GPUS = 256
MAX_COLLECTION_ERRORS = 100
LabelKey = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]{0,62}$")]
Hostname = Annotated[
    str,
    Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"),
]


class NodeIn(BaseModel):
    """The sending node: hostname (must match the token), labels, software versions and the GPU
    count it should have."""

    model_config = ConfigDict(extra="ignore")

    hostname: Hostname
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    agent_version: Text64 | None = None
    driver_version: Text64 | None = None
    cuda_version: Text64 | None = None
    expected_gpu_count: int | None = Field(
        default=None,
        description="GPUs the node should have (its agent counts NVIDIA display controllers on "
        "PCI, or is told with --expected-gpus); fewer in the inventory are missing GPUs. A "
        "value that is not a whole number 0-1024 is stored as unknown (null) and listed in "
        "left_out (reason value_error), never the batch refused",
    )

    @field_validator("expected_gpu_count", mode="before")
    @classmethod
    def _count(cls, value: Any) -> int | None:
        # Raised, not nulled here: app.ingest.salvage nulls it and names it in left_out.
        if value is None:
            return None
        whole = isinstance(value, int | float) and not isinstance(value, bool)
        if not whole or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("must be a whole number of GPUs (0-1024)")
        if not 0 <= value <= 1024:
            raise ValueError(f"must be 0-1024 GPUs, got {value}")
        return int(value)

    @field_validator("labels")
    @classmethod
    def _at_most_64_labels(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 64:
            raise ValueError("at most 64 labels")
        return value


class GpuIn(BaseModel):
    """One GPU of the node's inventory (``nvmlDeviceGetUUID``, ``…GetIndex``, ``…GetName``,
    ``…GetPciInfo().busId``, ``…GetMemoryInfo().total``, ``…GetMigMode``)."""

    model_config = ConfigDict(extra="ignore")

    uuid: GpuUuid
    index: Annotated[int, Field(ge=0, le=1023, strict=True)]
    name: Text256 | None = None
    pci_bus_id: BusId | None = None
    mem_total_bytes: Annotated[int, Field(ge=0, le=2**50, strict=True)] | None = None
    mig_mode: Literal["enabled", "disabled"] | None = None
    state: Literal["ok", "lost", "unknown_error"] = "ok"
    state_reason: Text1024 | None = None
    unavailable: (
        dict[
            Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")],
            Annotated[str, Field(max_length=128)],
        ]
        | None
    ) = None
    mig_instances: Annotated[list[MigInstanceIn], Field(max_length=MAX_MIG_INSTANCES)] | None = None
    processes: Annotated[list[ProcessIn], Field(max_length=MAX_PROCESSES)] | None = None

    @field_validator("unavailable")
    @classmethod
    def _at_most_256_reasons(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and len(value) > 256:
            raise ValueError("at most 256 entries")
        return value


class _SampleBase(BaseModel):
    model_config = ConfigDict(extra="ignore")

    gpu_uuid: GpuUuid
    sampled_at: Timestamp


def _make_sample_model() -> type[_SampleBase]:
    """``SampleIn``: ``_SampleBase`` plus one optional strict-number field per catalog metric."""
    fields: dict[str, Any] = {
        m.name: (Number | None, Field(default=None, description=f"{m.unit} — {m.source}"))
        for m in METRICS
    }
    model: type[_SampleBase] = create_model(
        "SampleIn",
        __base__=_SampleBase,
        __doc__="One GPU sample: every metric optional, null = not available; units in names.",
        **fields,
    )
    return model


if TYPE_CHECKING:
    SampleIn = _SampleBase
else:
    SampleIn = _make_sample_model()


class EventIn(BaseModel):
    """One fault event occurrence (an Xid line, a lost GPU …)."""

    model_config = ConfigDict(extra="ignore")

    occurred_at: Timestamp
    kind: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
    gpu_uuid: GpuUuid | None = None
    pci_bus_id: BusId | None = None
    xid: Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)] | None = None
    message: Message | None = None
    test: Annotated[bool, Field(strict=True)] = Field(
        default=False,
        description="a synthetic fault of the alert-path self-test: it goes through health, "
        "rules, incidents and notifications marked TEST",
    )

    @field_validator("message")
    @classmethod
    def _cut_message(cls, value: str | None) -> str | None:
        return value[:4096] if value is not None else None


class CollectionErrorIn(BaseModel):
    """Something that went wrong while collecting the batch (a hung NVML call …)."""

    model_config = ConfigDict(extra="ignore")

    source: Text64
    message: Message

    @field_validator("message")
    @classmethod
    def _cut_message(cls, value: str) -> str:
        return value[:1024]


class CollectionIn(BaseModel):
    """Which GPU collector produced the batch and what went wrong while collecting it."""

    model_config = ConfigDict(extra="ignore")

    collector: Annotated[str, Field(max_length=32)] | None = None
    errors: Annotated[list[CollectionErrorIn], Field(max_length=MAX_COLLECTION_ERRORS)] = Field(
        default_factory=list
    )


class IngestBatchIn(BaseModel):
    """A batch as pushed by an agent to ``POST /api/v1/ingest``. The node sections (from
    ``collection`` on) are optional: ``None`` means this agent does not collect them."""

    model_config = ConfigDict(extra="ignore")

    schema_version: Annotated[Literal[1], BeforeValidator(_exact_int)]
    batch_id: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$")]
    sent_at: Timestamp
    node: NodeIn
    gpus: Annotated[list[GpuIn], Field(max_length=MAX_GPUS)] = Field(default_factory=list)
    samples: Annotated[list[SampleIn], Field(max_length=MAX_SAMPLES)] = Field(default_factory=list)
    events: Annotated[list[EventIn], Field(max_length=MAX_EVENTS)] = Field(default_factory=list)
    collection: CollectionIn | None = None
    nvlinks: Annotated[list[NvlinkIn], Field(max_length=MAX_NVLINKS)] | None = None
    disks: Annotated[list[DiskIn], Field(max_length=MAX_DISKS)] | None = None
    mounts: Annotated[list[MountIn], Field(max_length=MAX_MOUNTS)] | None = None
    nfs_mounts: Annotated[list[NfsMountIn], Field(max_length=MAX_NFS_MOUNTS)] | None = None
    nic_ports: Annotated[list[NicPortIn], Field(max_length=MAX_NIC_PORTS)] | None = None
    topology: TopologyIn | None = None

    @field_validator("gpus")
    @classmethod
    def _one_entry_per_gpu(cls, gpus: list[GpuIn]) -> list[GpuIn]:
        """Two entries for one UUID would silently overwrite each other (the ingest keeps the
        first and counts the others, :mod:`app.ingest.salvage`). Indexes may repeat:
        when a GPU drops out, NVML renumbers the others while the lost one keeps its old index
        in the agent's report, and that batch is the one that must get through."""
        seen: set[str] = set()
        for gpu in gpus:
            if gpu.uuid in seen:
                raise ValueError(f"two GPUs with uuid {gpu.uuid!r}")
            seen.add(gpu.uuid)
        return gpus


RejectReason = Literal["unknown_gpu", "sampled_at_in_future", "older_than_retention", "invalid"]


class Rejection(BaseModel):
    """A sample the server did not store, by its position in ``samples``."""

    index: int
    gpu_uuid: str
    reason: RejectReason


class LeftOut(BaseModel):
    """A value or entry the server left out of an accepted batch instead of refusing it
    (:mod:`app.ingest.salvage`)."""

    loc: list[str | int] = Field(
        description="the path of the value or entry in the batch as sent, e.g. "
        '["samples", 3, "power_w"] or ["events", 0]'
    )
    reason: str = Field(description="why: pydantic's error type, e.g. float_parsing, missing")
    action: Literal["nulled", "entry_left_out"] = Field(
        description="nulled: the value is stored as null (or its default); entry_left_out: "
        "the whole entry (a sample, an event, a GPU …) is not stored"
    )


class GpuConflict(BaseModel):
    """A GPU UUID in ``gpus`` that another node reported within the staleness window: it is not
    taken over (its samples are rejected as ``unknown_gpu``)."""

    uuid: str
    node: str


#: The forms of the bulk lists the server reads (:mod:`app.ingest.table_form`).
BULK_FORMS = ("objects", "table")


class IngestResult(BaseModel):
    """The answer to an accepted batch (also replayed verbatim for a re-sent batch id)."""

    batch_id: str
    schema_version: int = SCHEMA_VERSION
    replayed: bool = False
    received_at: AwareDatetime
    clock_skew_s: float
    samples_received: int
    samples_stored: int
    samples_duplicate: int
    samples_rejected: int
    rejected_by_reason: dict[str, int]
    rejections: list[Rejection]
    nulled_values: dict[str, int]
    events_stored: int
    events_rejected: dict[str, int] = Field(default_factory=dict)
    gpu_conflicts: list[GpuConflict] = Field(default_factory=list)
    gpus_missing: list[str] = Field(default_factory=list)
    content_sha256: str | None = None
    sections_stored: dict[str, int] = Field(default_factory=dict)
    sections_rejected: dict[str, int] = Field(default_factory=dict)
    topology_changed: bool | None = None
    left_out: list[LeftOut] = Field(
        default_factory=list,
        description="the first 100 values and entries left out because the server cannot hold "
        "them, with their path and reason (docs/ingest.md)",
    )
    left_out_by_reason: dict[str, int] = Field(
        default_factory=dict,
        description="every value and entry left out, counted by `<list>.<reason>`, e.g. "
        "`samples.float_parsing`, `events.missing`",
    )
    bulk_forms: list[str] = Field(
        default_factory=lambda: list(BULK_FORMS),
        description="the forms this server reads the bulk lists (`samples` and the dated node "
        "sections) in: `objects` (a list of objects) and `table` (`fields` + `rows`, "
        "docs/ingest.md); an agent sends its next batches in the table form once it reads "
        "`table` here",
    )


def metric_values(sample: Any) -> dict[str, Any]:
    """The metric fields of a validated ``SampleIn`` as a dict (name → raw value or None)."""
    return {m.name: getattr(sample, m.name) for m in METRICS}

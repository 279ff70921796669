"""Per-GPU inventory details of the payload (agents 0.2 and later): MIG instances and compute
processes, and the plausible ranges of their numbers."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.metrics.plausible import Bound, Number

MAX_MIG_INSTANCES = 64
MAX_PROCESSES = 1024

_MEMORY = Bound(0, 2**50, integer=True)

#: Plausible ranges; outside them a value is stored as null and counted
#: (``mig_instances.mem_used_bytes``, ``processes.used_memory_bytes``).
MIG_BOUNDS: dict[str, Bound] = {"mem_total_bytes": _MEMORY, "mem_used_bytes": _MEMORY}
PROCESS_BOUNDS: dict[str, Bound] = {"used_memory_bytes": _MEMORY}

InstanceId = Annotated[int, Field(ge=0, le=1023, strict=True)]


class MigInstanceIn(BaseModel):
    """A MIG instance under its parent GPU (``nvmlDeviceGetMigDeviceHandleByIndex``)."""

    model_config = ConfigDict(extra="ignore")

    uuid: Annotated[str, Field(max_length=96)] | None = None
    gpu_instance_id: InstanceId | None = None
    compute_instance_id: InstanceId | None = None
    profile: Annotated[str, Field(max_length=64)] | None = None
    mem_total_bytes: Number | None = None
    mem_used_bytes: Number | None = None


class ProcessIn(BaseModel):
    """A compute process on the GPU (``nvmlDeviceGetComputeRunningProcesses``); ``name`` and
    ``user`` are null when the PID is not visible to the agent."""

    model_config = ConfigDict(extra="ignore")

    pid: Annotated[int, Field(ge=0, le=2**32 - 1, strict=True)]
    used_memory_bytes: Number | None = None
    name: str | None = None
    user: str | None = None

    @field_validator("name", "user")
    @classmethod
    def _cut(cls, value: str | None) -> str | None:
        return value[:256] if value is not None else None

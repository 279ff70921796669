"""The collector interface: where an agent gets its GPUs, samples and events from.

A collector is the agent's one choke point to the hardware (or to the simulator). It never
raises for a single GPU's trouble: a lost GPU is reported as ``state="lost"`` with ``None``
metrics while the other GPUs keep reporting.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime
from typing import Any

from agents.payload import EventDict, GpuInfo, NodeInfo, Sample


class CollectorUnavailable(RuntimeError):
    """The collector cannot run here (no driver, no library, not implemented); the message says
    why and what to do instead."""


class Collector(ABC):
    """A source of GPU inventory, samples and events for one node.

    Subclasses register under a name in :mod:`agents.collectors` (``simulated``, ``nvml``).
    """

    #: The registry name, e.g. ``"simulated"``.
    name: str = ""

    @abstractmethod
    def node_info(self) -> NodeInfo:
        """Return the node's driver and CUDA versions (``nvmlSystemGetDriverVersion``,
        ``nvmlSystemGetCudaDriverVersion``)."""

    @abstractmethod
    def inventory(self) -> list[GpuInfo]:
        """Return the GPUs as seen now, one :class:`~agents.payload.GpuInfo` per GPU, by index."""

    @abstractmethod
    def sample(self, now: datetime) -> list[Sample]:
        """Read every GPU once and return one sample per GPU dated ``now``.

        ``now`` must be timezone-aware. A metric that is not available is ``None``; a lost GPU
        yields a sample whose metrics are all ``None``.
        """

    @abstractmethod
    def drain_events(self) -> list[EventDict]:
        """Return the events that occurred since the last call (each occurrence once)."""

    def urgent_pending(self) -> bool:
        """Whether something happened since the last round that the next round must report at
        once (an Xid in NVML's event set, a simulated fault). Called between rounds about once
        a second (:attr:`agents.agent.AgentConfig.watch_interval_s`): it must not block. The
        default, for collectors that learn of faults only by sampling, is never."""
        return False

    def nvlinks(self, now: datetime) -> list[dict[str, Any]]:
        """Return one ``nvlinks`` entry per GPU and link dated ``now`` (see docs/ingest.md,
        "nvlinks"); the default, for collectors without NVLink data, is none."""
        return []

    def topology(self, now: datetime) -> dict[str, Any] | None:
        """Return the GPU part of the ``topology`` section (devices of kind ``gpu`` and the
        GPU↔GPU links), or ``None`` when this collector cannot read it."""
        return None

    def collection_errors(self) -> list[dict[str, str]]:
        """Return and forget the collection errors since the last call, as
        ``{"source": …, "message": …}`` (a hung NVML call, an unreadable file …)."""
        return []

    def paused_until(self) -> datetime | None:
        """Return the wall-clock time until which the agent must neither collect nor push, or
        ``None``. Only the simulator's ``agent_stop`` fault uses it (a dead agent, as seen from
        the server)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, most collectors hold nothing
        """Release what the collector holds (an NVML handle); the default does nothing."""

"""The collector used when no NVIDIA driver is found: no GPUs, so the agent still reports the
node's storage, network and kernel events (and the dashboard shows a node with zero GPUs, never
made-up ones)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agents.collectors.base import Collector
from agents.payload import EventDict, GpuInfo, NodeInfo, Sample


class NoGpuCollector(Collector):
    """Reports no GPU. ``reason`` (why no GPU collector could run) is a collection error of every
    batch, so the server keeps showing why the node has no GPUs."""

    name = "none"

    def __init__(self, reason: str = "no NVIDIA driver found", **_options: Any) -> None:
        self.reason = reason

    def node_info(self) -> NodeInfo:
        """No driver, no versions."""
        return {"driver_version": None, "cuda_version": None}

    def inventory(self) -> list[GpuInfo]:
        """No GPUs."""
        return []

    def sample(self, now: datetime) -> list[Sample]:
        """No samples."""
        return []

    def drain_events(self) -> list[EventDict]:
        """No GPU events (kernel Xid lines come from the kmsg host source)."""
        return []

    def collection_errors(self) -> list[dict[str, str]]:
        """The reason, at every reading."""
        return [{"source": "collector", "message": self.reason[:1024]}]

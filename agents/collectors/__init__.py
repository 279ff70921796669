"""Collector registry: each kind of collector is a name mapped to a lazily imported factory.

Lazy, so that ``import agents`` never imports ``pynvml`` and a machine without the NVIDIA
driver can still run the simulated collector.
"""

from __future__ import annotations

import importlib
from typing import Any

from agents.collectors.base import Collector, CollectorUnavailable

__all__ = ["COLLECTORS", "Collector", "CollectorUnavailable", "create_collector"]

#: name → "module:factory"; the factory takes keyword options and returns a :class:`Collector`.
COLLECTORS: dict[str, str] = {
    "simulated": "agents.simulated.collector:SimulatedCollector",
    "nvml": "agents.collectors.nvml:NvmlCollector",
    "nvidia-smi": "agents.collectors.nvidia_smi:NvidiaSmiCollector",
}


def create_collector(name: str, **options: Any) -> Collector:
    """Build the collector registered as ``name`` with ``options`` (e.g. ``hostname``,
    ``gpu_count``, ``seed`` for ``simulated``).

    Raises:
        KeyError: no collector of that name (the message lists the known ones).
        CollectorUnavailable: the collector cannot run on this machine or is not implemented.
    """
    try:
        target = COLLECTORS[name]
    except KeyError:
        raise KeyError(
            f"unknown collector {name!r}; known: {', '.join(sorted(COLLECTORS))}"
        ) from None
    module_name, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    collector: Collector = factory(**options)
    return collector

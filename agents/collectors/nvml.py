"""The NVML collector (real GPUs through ``pynvml``): registered, not implemented in 0.1.0.

It will be the agent's single choke point to NVML (see STYLE.md, nvitop): ``pynvml`` imported
here and only here, lazily, each unsupported call logged once, a lost GPU marked lost.
"""

from __future__ import annotations

from typing import Any

from agents.collectors.base import CollectorUnavailable


def NvmlCollector(**_options: Any) -> Any:
    """Refuse to build: the NVML collector is not implemented yet in this version.

    Raises:
        CollectorUnavailable: always, naming the simulated collector as the alternative.
    """
    raise CollectorUnavailable(
        "the nvml collector is not implemented yet in this version (0.1.0); "
        "use --collector simulated for a simulated node"
    )

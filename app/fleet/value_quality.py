"""Why a GPU's metric has no value, as the pages label it and the rules judge it.

Three causes, told apart (issue 13, "value quality"):

* **not supported** — the driver says the GPU cannot report it (``unavailable[metric]`` is
  ``NOT_SUPPORTED``: power on some boards, utilization under MIG). A property of the card: a
  rule never counts it as "no data".
* **not readable** — the driver could not read it this time (``TIMEOUT``, ``GPU_IS_LOST``,
  ``NO_PERMISSION`` …, the other codes of ``unavailable``).
* **implausible** — the agent sent a value outside the metric's plausible range (65535 °C) and
  the server stored null (``implausible[metric]``, :mod:`app.metrics.plausible`), or an
  inventory value it could not hold (a total memory of 2**64-1, a PCI bus id in an odd form:
  ``implausible_inventory[field]``, :mod:`app.ingest.salvage`).

Anything else null was not reported by the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The reason the pages show for a metric the server dropped as implausible.
IMPLAUSIBLE = "IMPLAUSIBLE"


def is_not_supported(reason: str | None) -> bool:
    """Whether an ``unavailable`` reason (an NVML return code name, with or without its
    ``NVML_ERROR_`` prefix) says the GPU does not support the metric."""
    return reason is not None and reason.upper().removeprefix("NVML_ERROR_") == "NOT_SUPPORTED"


def value_reasons(gpu: Any) -> dict[str, str]:
    """Metric or inventory field → why it has no value, for a stored GPU: its ``unavailable``
    reasons and :data:`IMPLAUSIBLE` for the metrics its newest sample had dropped and the
    inventory fields its latest batch had left out (these win: the driver did give a value)."""
    reasons: dict[str, str] = dict(getattr(gpu, "unavailable", None) or {})
    dropped: Mapping[str, str] = getattr(gpu, "implausible", None) or {}
    left_out: Mapping[str, str] = getattr(gpu, "implausible_inventory", None) or {}
    for name in (*dropped, *left_out):
        reasons[name] = IMPLAUSIBLE
    return reasons


def unsupported_metrics(unavailable: Mapping[str, str] | None) -> frozenset[str]:
    """The metrics of an ``unavailable`` map that the GPU does not support."""
    return frozenset(m for m, why in (unavailable or {}).items() if is_not_supported(why))

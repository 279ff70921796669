"""ECC error totals from ``nvidia-smi -q -x``, as ``nvmlDeviceGetTotalEccErrors`` gives them.

Two layouts exist: up to driver ~515, ``ecc_errors/<volatile|aggregate>/<single_bit|
double_bit>/total``; since then (and on some GPUs earlier) per-memory counters
``sram_correctable``, ``sram_uncorrectable`` (split into ``_parity`` and ``_secded`` from driver
590) and ``dram_correctable``/``dram_uncorrectable``, whose sum is the total.
"""

from __future__ import annotations

from agents.numbers import ascii_int
from agents.nvidia_smi.values import Fields, reason_for

_PARTS = {
    "corrected": ("sram_correctable", "dram_correctable"),
    "uncorrected": (
        "sram_uncorrectable",
        "sram_uncorrectable_parity",
        "sram_uncorrectable_secded",
        "dram_uncorrectable",
    ),
}
_OLD = {"corrected": "single_bit", "uncorrected": "double_bit"}


def ecc_counts(f: Fields) -> dict[str, int | None]:
    """``ecc_{corrected,uncorrected}_{volatile,aggregate}_count`` of the ``<gpu>`` in ``f``;
    a total whose every part is N/A is ``None`` with that reason."""
    counts: dict[str, int | None] = {}
    for kind in ("corrected", "uncorrected"):
        for counter in ("volatile", "aggregate"):
            key = f"ecc_{kind}_{counter}_count"
            base = f"ecc_errors/{counter}"
            if f.element.find(f"{base}/{_OLD[kind]}") is not None:
                value = f.value(key, f"{base}/{_OLD[kind]}/total")
                counts[key] = None if value is None else int(value)
                continue
            counts[key] = _sum_parts(f, key, [f"{base}/{part}" for part in _PARTS[kind]])
    return counts


def _sum_parts(f: Fields, key: str, paths: list[str]) -> int | None:
    total, reasons = 0, []
    present = False
    for path in paths:
        text = f.text(path)
        if text is None:
            continue
        reason = reason_for(text)
        if reason is not None:
            reasons.append(reason)
            continue
        count = ascii_int(text)
        if count is not None:
            total += count
            present = True
    if present:
        return total
    f.reasons[key] = reasons[0] if reasons else "NOT_REPORTED"
    return None

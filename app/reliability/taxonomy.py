"""The failure taxonomy of incidents, by the component that failed, in the style of Meta's
Llama 3 interruption table ("The Llama 3 Herd of Models", 2024, Table 5: faulty GPU, GPU HBM3
memory, NVLink …), from the incident's event kinds and Xids (NVIDIA "Xid Errors" catalog)."""

from __future__ import annotations

from collections.abc import Iterable

#: Category → the Xids that put an incident in it; the first matching category wins, in order.
CATEGORIES: tuple[tuple[str, frozenset[int]], ...] = (
    ("GPU lost / fallen off the bus", frozenset({79})),
    ("GPU memory (ECC, row remap)", frozenset({48, 63, 64, 92, 94, 95, 140})),
    ("NVLink", frozenset({74})),
    ("GSP / firmware", frozenset({119, 120, 143})),
    ("GPU hang or timeout", frozenset({8, 109})),
    ("PCIe / bus", frozenset({38, 56, 57})),
    ("Power or thermal", frozenset({61, 62})),
)
LOST_KINDS = frozenset({"gpu_lost", "gpu_fallen_off_bus"})
OTHER_XID = "Other Xid"
OTHER = "Other"

#: Every category in the order shown.
ORDER: tuple[str, ...] = (*(name for name, _ in CATEGORIES), OTHER_XID, OTHER)


def category(kinds: Iterable[str], xids: Iterable[int]) -> str:
    """The category of an incident with these event kinds and Xids."""
    kinds, xids = set(kinds), set(xids)
    if kinds & LOST_KINDS:
        return CATEGORIES[0][0]
    for name, members in CATEGORIES:
        if xids & members:
            return name
    return OTHER_XID if xids else OTHER

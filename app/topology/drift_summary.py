"""Each comparison group's majority signature in a line, and how many of its nodes conform."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from app.series.writes import natural_key
from app.topology.drift import DriftFinding
from app.topology.matrix import nvlink_count
from app.topology.signature import NodeSignature


@dataclass(frozen=True)
class GroupSummary:
    """One group (:attr:`NodeSignature.group`): its fabric, GPU model and count class, and the
    majority's GPU↔GPU link code (``NV12``; ``"none"`` without NVLink), NIC count and number of
    NUMA nodes holding GPUs (None where the nodes tie). ``conforming`` nodes have no finding,
    ``drifting`` ones have at least one besides ``partial``; ``partial`` were not compared."""

    group: str
    fabric: str
    gpu_model: str | None
    count_class: int
    hostnames: tuple[str, ...]
    nvlink_type: str | None
    nic_count: int | None
    numa_nodes: int | None
    conforming: int
    drifting: int
    partial: int


def _top(values: Iterable[str]) -> str | None:
    ranked = Counter(values).most_common(2)
    if not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def _nvlink_type(sig: NodeSignature) -> str:
    gpu_pairs = [code for (a, b), code in sig.links.items() if {a, b} <= sig.gpus]
    nv = [code for code in gpu_pairs if nvlink_count(code) is not None]
    return Counter(nv).most_common(1)[0][0] if nv else "none"


def summarise(
    signatures: Mapping[str, NodeSignature], findings: Iterable[DriftFinding]
) -> list[GroupSummary]:
    """One :class:`GroupSummary` per group of ``signatures``, sorted by group name."""
    groups: dict[str, list[NodeSignature]] = defaultdict(list)
    for sig in signatures.values():
        groups[sig.group].append(sig)
    kinds: dict[str, set[str]] = defaultdict(set)
    for finding in findings:
        kinds[finding.hostname].add(finding.kind)
    summaries = []
    for group in sorted(groups):
        members = sorted(groups[group], key=lambda s: natural_key(s.hostname))
        compared = [s for s in members if not s.partial] or members
        nics = _top(str(len(s.nics)) for s in compared)
        numa = _top(str(len({n for n in s.gpu_numa.values() if n is not None})) for s in compared)
        partial = sum(1 for s in members if s.partial)
        drifting = sum(1 for s in members if not s.partial and kinds[s.hostname])
        summaries.append(
            GroupSummary(
                group=group,
                fabric=members[0].fabric,
                gpu_model=members[0].gpu_model,
                count_class=members[0].count_class,
                hostnames=tuple(s.hostname for s in members),
                nvlink_type=_top(_nvlink_type(s) for s in compared),
                nic_count=int(nics) if nics is not None else None,
                numa_nodes=int(numa) if numa is not None else None,
                conforming=len(members) - partial - drifting,
                drifting=drifting,
                partial=partial,
            )
        )
    return summaries

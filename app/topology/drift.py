"""Topology drift: nodes that differ from the majority of their fabric peers.

Nodes are compared only with nodes of the same group (fabric label, GPU count class and GPU model:
:attr:`NodeSignature.group`), one facet at a time (each device's presence, each device pair's
``topo -m`` code, each GPU's NUMA node and NVLinks up, each NIC's port state). The value most nodes
have is the expected one; a node that differs gets a finding saying so in words. When two values
are equally common there is no majority, and the finding says that instead of guessing. A node
whose topology is partial is reported once as ``partial`` and left out of the comparison, so a
half-read matrix does not look like drift on every peer.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.series.writes import natural_key
from app.topology.drift_source import load_signatures
from app.topology.matrix import nvlink_count
from app.topology.signature import NodeSignature

#: Finding kinds, in the order a node's findings are listed.
KINDS = (
    "partial",
    "gpu_missing",
    "gpu_extra",
    "nic_missing",
    "nic_extra",
    "nvlink_fewer",
    "link_type",
    "numa",
    "nvlink_count",
    "nic_down",
    "nic_state",
    "pcie_downtrained",
    "no_majority",
)


@dataclass(frozen=True)
class DriftFinding:
    """One way ``hostname`` differs from its ``group`` (:attr:`NodeSignature.group`).

    ``kind`` is one of :data:`KINDS`; ``detail`` says it in words (``"GPU3↔GPU5: NV12 expected
    (7 of 8 nodes), NV6 here"``); ``expected`` is the majority value (None for a tie or a partial
    topology) and ``actual`` the node's own (``"missing"`` for an absent device)."""

    hostname: str
    group: str
    kind: str
    detail: str
    expected: str | None
    actual: str | None


def _majority(values: Mapping[str, str]) -> tuple[str, int] | None:
    """The most common value and its count; None when two values tie for first."""
    ranked = Counter(values.values()).most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None
    return ranked[0]


def _tie_text(values: Mapping[str, str]) -> str:
    ranked = sorted(Counter(values.values()).items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{value} on {count} node{'s' * (count != 1)}" for value, count in ranked)


@dataclass(frozen=True)
class _Off:
    """A node whose value of a facet is not the majority's; ``share`` is ``"(7 of 8 nodes)"``."""

    host: str
    expected: str
    actual: str
    share: str


def _fewer(actual: str, expected: str) -> bool:
    return actual.isdigit() and expected.isdigit() and int(actual) < int(expected)


class _Compare:
    """Collects the findings of one group."""

    def __init__(self, group: str, nodes: Mapping[str, NodeSignature]) -> None:
        self.group = group
        self.nodes = nodes
        self.findings: list[DriftFinding] = []

    def add(
        self, host: str, kind: str, detail: str, expected: str | None, actual: str | None
    ) -> None:
        self.findings.append(DriftFinding(host, self.group, kind, detail, expected, actual))

    def facet(self, label: str, values: Mapping[str, str]) -> Iterator[_Off]:
        """Compare one facet (host → value): yield each node off the majority; on a tie add a
        ``no_majority`` finding for every node instead."""
        if len(values) < 2 or len(set(values.values())) == 1:
            return
        found = _majority(values)
        if found is None:
            ties = _tie_text(values)
            for host, actual in values.items():
                text = f"{label}: no majority ({ties}), {actual} here"
                self.add(host, "no_majority", text, None, actual)
            return
        expected, count = found
        for host, actual in values.items():
            if actual != expected:
                yield _Off(host, expected, actual, f"({count} of {len(values)} nodes)")

    def presence(self, what: str, members: Callable[[NodeSignature], frozenset[str]]) -> None:
        everything = set().union(*(members(s) for s in self.nodes.values()))
        for name in sorted(everything, key=natural_key):
            values = {
                h: "present" if name in members(s) else "missing" for h, s in self.nodes.items()
            }
            for off in self.facet(name, values):
                if off.actual == "missing":
                    text = f"{name} missing (present on {off.share[1:]}"
                    self.add(off.host, f"{what}_missing", text, "present", "missing")
                else:
                    text = f"{name} present here (missing on {off.share[1:]}"
                    self.add(off.host, f"{what}_extra", text, "missing", "present")

    def links(self) -> None:
        keys = set().union(*(s.links.keys() for s in self.nodes.values()))
        for a, b in sorted(keys, key=lambda k: (natural_key(k[0]), natural_key(k[1]))):
            label = f"{a}↔{b}"
            values = {
                h: s.links.get((a, b), "none")
                for h, s in self.nodes.items()
                if {a, b} <= s.gpus | s.nics
            }
            for off in self.facet(label, values):
                here, usual = nvlink_count(off.actual), nvlink_count(off.expected)
                fewer = here is not None and usual is not None and here < usual
                text = f"{label}: {off.expected} expected {off.share}, {off.actual} here"
                kind = "nvlink_fewer" if fewer else "link_type"
                self.add(off.host, kind, text, off.expected, off.actual)

    def per_device(
        self, kind: str, noun: str, values_of: Callable[[NodeSignature], Mapping[str, Any]]
    ) -> None:
        devices = set().union(*(values_of(s).keys() for s in self.nodes.values()))
        for device in sorted(devices, key=natural_key):
            values = {
                h: "N/A" if values_of(s)[device] is None else str(values_of(s)[device])
                for h, s in self.nodes.items()
                if device in values_of(s)
            }
            for off in self.facet(device, values):
                text = noun.format(
                    device=device, expected=off.expected, actual=off.actual, share=off.share
                )
                found = kind
                if kind == "nvlink_count" and _fewer(off.actual, off.expected):
                    found = "nvlink_fewer"
                if kind == "nic_state" and off.expected == "ACTIVE":
                    found = "nic_down"
                self.add(off.host, found, text, off.expected, off.actual)

    def pcie(self) -> None:
        for host, sig in self.nodes.items():
            for gpu in sorted(sig.pcie, key=natural_key):
                gen, gen_max, width, width_max = sig.pcie[gpu]
                low_gen = gen is not None and gen_max is not None and gen < gen_max
                low_width = width is not None and width_max is not None and width < width_max
                if low_gen or low_width:
                    actual, expected = f"gen{gen} x{width}", f"gen{gen_max} x{width_max}"
                    text = f"{gpu}: PCIe link {actual} here, {expected} is its maximum"
                    self.add(host, "pcie_downtrained", text, expected, actual)


def _compare_one(group: str, members: Mapping[str, NodeSignature]) -> list[DriftFinding]:
    partial = {h: s for h, s in members.items() if s.partial}
    nodes = {h: s for h, s in members.items() if not s.partial}
    run = _Compare(group, nodes)
    for host, sig in partial.items():
        why = "; ".join(sig.errors) or "no reason given"
        run.add(host, "partial", f"topology is partial, not compared: {why}", None, "partial")
    if len(nodes) >= 2:
        run.presence("gpu", lambda s: s.gpus)
        run.presence("nic", lambda s: s.nics)
        run.links()
        run.per_device(
            "numa",
            "{device}: NUMA node {expected} expected {share}, {actual} here",
            lambda s: s.gpu_numa,
        )
        run.per_device(
            "nvlink_count",
            "{device}: {expected} NVLinks up expected {share}, {actual} here",
            lambda s: s.nvlinks_up,
        )
        run.per_device(
            "nic_state",
            "{device}: port state {expected} expected {share}, {actual} here",
            lambda s: s.nic_states,
        )
    run.pcie()
    return run.findings


def compare_group(signatures: Mapping[str, NodeSignature]) -> list[DriftFinding]:
    """The drift findings of ``signatures`` (hostname → signature). Signatures of different
    groups (fabric, GPU model, count class) are never compared with each other. Sorted by group,
    hostname and :data:`KINDS` order, facets in device order."""
    groups: dict[str, dict[str, NodeSignature]] = defaultdict(dict)
    for host, sig in signatures.items():
        groups[sig.group][host] = sig
    findings: list[DriftFinding] = []
    for group in sorted(groups):
        findings += _compare_one(group, groups[group])
    order = {kind: i for i, kind in enumerate(KINDS)}
    return sorted(findings, key=lambda f: (f.group, natural_key(f.hostname), order.get(f.kind, 99)))


def find_drift(session: Session, *, now: datetime) -> list[DriftFinding]:
    """Drift findings for the whole fleet as of ``now``: each node's latest stored topology,
    GPU inventory and newest NVLink/NIC readings (see :func:`app.topology.drift_source.
    load_signatures`), compared by :func:`compare_group`."""
    return compare_group(load_signatures(session, now=now))

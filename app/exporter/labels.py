"""The labels of a GPU's series: dcgm-exporter's, then the node labels of an allow-list.

dcgm-exporter labels each series ``gpu`` (the GPU's index), ``UUID``, ``pci_bus_id``,
``device`` (``nvidia<N>``), ``modelName``, ``Hostname`` and ``DCGM_FI_DRIVER_VERSION``; the
same here, in that order, from the node's and the GPU's inventory (a label whose value is
unknown is left out). ``device`` is ``nvidia<index>``: dcgm-exporter uses the device's minor
number, which the agent does not report and which equals the index on most systems.

A node's labels follow, only those named in the ``metrics_node_labels`` setting, sorted, under
their own keys: the ingest accepts only keys that are Prometheus label names already
(``[a-z_][a-z0-9_]*``, :data:`app.ingest.schemas.LabelKey`). The allow-list keeps the label
*names* bounded; the series count does not grow with it (a GPU has one node, one value per
label), though a changed value starts a new series.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: dcgm-exporter's labels of a GPU's series, in its order.
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"
#: Keys a node label may not be exported under: the GPU labels (and the lower-case ``uuid``
#: and ``hostname`` that NVIDIA's dashboard and older exporters use), dcgm-exporter's
#: Kubernetes pod labels, and the names Prometheus gives a target or a histogram/summary.
RESERVED = frozenset(
    {
        "gpu",
        "uuid",
        "pci_bus_id",
        "device",
        "hostname",
        "container",
        "namespace",
        "pod",
        "pod_uid",
        "instance",
        "job",
        "le",
        "quantile",
    }
)
#: At most this many node labels are exported.
MAX_NODE_LABELS = 16
#: A node label key the ingest accepts (``app.ingest.schemas.LabelKey``).
NODE_LABEL_KEY = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def check_allow_list(keys: Sequence[str]) -> list[str]:
    """The node label keys of the ``metrics_node_labels`` setting, checked, sorted, once each.

    Raises:
        ValueError: more than :data:`MAX_NODE_LABELS`; a key no node can have (not
            ``[a-z_][a-z0-9_]*``, at most 63 characters); a key Prometheus reserves (``__``
            first) or that is one of :data:`RESERVED`.
    """
    if len(keys) > MAX_NODE_LABELS:
        raise ValueError(f"at most {MAX_NODE_LABELS} node labels, got {len(keys)}")
    for key in keys:
        if not NODE_LABEL_KEY.match(key):
            raise ValueError(f"{key!r} is not a node label key ([a-z_][a-z0-9_]*, ≤ 63 chars)")
        if key in RESERVED or key.startswith("__"):
            raise ValueError(f"node label {key!r} would take a reserved label name")
    return sorted(set(keys))


def gpu_labels(row: Mapping[str, Any], node_labels: Iterable[str]) -> dict[str, str]:
    """The labels of one GPU's series, in order, from its scrape row (``gpu_index``,
    ``uuid``, ``pci_bus_id``, ``model_name``, ``hostname``, ``driver_version``, ``labels``)
    and the node label keys to export (sorted); values that are unknown are left out."""
    index = row["gpu_index"]
    values: dict[str, Any] = {
        "gpu": index,
        "UUID": row["uuid"],
        "pci_bus_id": row["pci_bus_id"],
        "device": f"nvidia{index}",
        "modelName": row["model_name"],
        "Hostname": row["hostname"],
        DRIVER_LABEL: row["driver_version"],
    }
    node = row["labels"] or {}
    for key in node_labels:
        values[key] = node.get(key)
    return {name: str(value) for name, value in values.items() if value not in (None, "")}

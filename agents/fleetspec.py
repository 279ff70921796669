"""The simulated fleet's description: the fleet file and the ``--fault`` schedule syntax.

Fleet file (JSON)::

    {"nodes": [{"hostname": "gpu-a-001", "token": "fwt_…", "gpu_count": 8,
                "labels": {"cluster": "a", "rack": "r07"}}]}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.payload import validate_hostname, validate_labels
from agents.simulated.faults import FAULT_KINDS

_FAULT = re.compile(
    r"^(?P<host>[^:@]+):(?P<kind>[a-z_]+?)(?P<xid>\d+)?@(?P<at>\d+(\.\d+)?)(:(?P<gpu>\d+))?$"
)


@dataclass(frozen=True)
class FleetNode:
    """One simulated node: its hostname, its ingest token, its GPU count (8 → HGX H100,
    4 → PCIe L40S, other counts → the nearest shape resized) and its labels."""

    hostname: str
    token: str
    gpu_count: int = 8
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ScheduledFault:
    """A fault to inject ``at_s`` seconds after the fleet starts.

    ``kind`` is one of ``gpu_lost``, ``xid``, ``thermal_throttle``, ``agent_stop``; ``xid`` the
    code for ``xid`` (``None``: random); ``gpu_index`` ``None`` means a random GPU.
    """

    hostname: str
    kind: str
    at_s: float
    gpu_index: int | None = None
    xid: int | None = None


def parse_fault(text: str) -> ScheduledFault:
    """Parse ``HOST:KIND@SECONDS[:GPU_INDEX]``; KIND may be ``xidNN`` (``xid48``) for one code.

    Raises:
        ValueError: the text does not match, or the kind is unknown.
    """
    match = _FAULT.match(text.strip())
    if match is None:
        raise ValueError(f"fault {text!r}: expected HOST:KIND@SECONDS[:GPU_INDEX]")
    kind, xid = match["kind"], match["xid"]
    if xid is not None and kind not in ("xid", "xid_repeat"):
        raise ValueError(f"fault {text!r}: only xid and xid_repeat take a code (xid48)")
    if kind not in FAULT_KINDS:
        raise ValueError(f"fault {text!r}: unknown kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
    return ScheduledFault(
        hostname=match["host"],
        kind=kind,
        at_s=float(match["at"]),
        gpu_index=None if match["gpu"] is None else int(match["gpu"]),
        xid=None if xid is None else int(xid),
    )


def load_fleet_file(path: Path | str) -> list[FleetNode]:
    """Read and check a fleet file.

    Raises:
        OSError: the file cannot be read.
        ValueError: not JSON, or a node lacks a valid hostname, a token, a GPU count in 0..256,
            or has invalid labels (the message names the node).
    """
    try:
        document: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), list):
        raise ValueError(f'{path}: expected {{"nodes": [...]}}')
    return [_node(entry, f"{path}: nodes[{i}]") for i, entry in enumerate(document["nodes"])]


def _node(entry: Any, where: str) -> FleetNode:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: not an object")
    hostname, token = entry.get("hostname"), entry.get("token")
    gpu_count, labels = entry.get("gpu_count", 8), entry.get("labels", {})
    if not isinstance(hostname, str):
        raise ValueError(f"{where}: hostname missing")
    if not isinstance(token, str) or not token:
        raise ValueError(f"{where}: token missing")
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or not 0 <= gpu_count <= 256:
        raise ValueError(f"{where}: gpu_count must be an integer 0..256")
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ValueError(f"{where}: labels must map strings to strings")
    try:
        validate_hostname(hostname)
        validate_labels(labels)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return FleetNode(hostname=hostname, token=token, gpu_count=gpu_count, labels=labels)

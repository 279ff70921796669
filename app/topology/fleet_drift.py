"""The fleet's drift as the pages and the API show it (computed by
:mod:`app.topology.drift_state`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app.topology.drift import DriftFinding
from app.topology.drift_summary import GroupSummary


@dataclass(frozen=True)
class FleetDrift:
    """The fleet's groups and every finding, as of ``at``."""

    at: datetime
    groups: list[GroupSummary]
    findings: list[DriftFinding]

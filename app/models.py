"""Imports every table module so ``Base.metadata`` is complete (for Alembic and the tests)."""

from app.access.models import ApiToken, LoginFailure, Team, User, UserSession, user_team
from app.alerts.models import (
    AlertAck,
    AlertEvent,
    AlertInstance,
    AlertRule,
    AlertSilence,
    Runbook,
)
from app.audit.models import AuditEvent
from app.auth.models import EnrollmentToken, NodeToken
from app.dcgm.models import DcgmEndpoint
from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node
from app.health.models import NodeHealthState
from app.incidents.models import Incident, IncidentEvent
from app.ingest.models import IngestBatch
from app.lifecycle.models import LifecycleTransition, NodeLifecycle
from app.maintenance.models import MaintenanceWindow
from app.notify.models import (
    NotifyChannel,
    NotifyDelivery,
    NotifyDestination,
    NotifyIncidentMessage,
    NotifyRoute,
)
from app.remediation.models import AutomationDecision, CircuitBreaker, NodeAction
from app.series import models as series_models  # every sample table
from app.topology.models import TopologyChange, TopologyDriftState, TopologySnapshot
from app.workloads.models import IncidentJob, WorkloadCapture

__all__ = [
    "AlertAck",
    "AlertEvent",
    "AlertInstance",
    "AlertRule",
    "AlertSilence",
    "ApiToken",
    "AuditEvent",
    "AutomationDecision",
    "CircuitBreaker",
    "DcgmEndpoint",
    "EnrollmentToken",
    "Gpu",
    "Incident",
    "IncidentEvent",
    "IncidentJob",
    "IngestBatch",
    "LifecycleTransition",
    "LoginFailure",
    "MaintenanceWindow",
    "Node",
    "NodeAction",
    "NodeEvent",
    "NodeHealthState",
    "NodeLifecycle",
    "NodeToken",
    "NotifyChannel",
    "NotifyDelivery",
    "NotifyDestination",
    "NotifyIncidentMessage",
    "NotifyRoute",
    "Runbook",
    "Team",
    "TopologyChange",
    "TopologyDriftState",
    "TopologySnapshot",
    "User",
    "UserSession",
    "WorkloadCapture",
    "series_models",
    "user_team",
]

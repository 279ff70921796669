"""Imports every table module so ``Base.metadata`` is complete (for Alembic and the tests)."""

from app.alerts.models import (
    AlertAck,
    AlertEvent,
    AlertInstance,
    AlertRule,
    AlertSilence,
    Runbook,
)
from app.auth.models import NodeToken
from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node
from app.health.models import NodeHealthState
from app.ingest.models import IngestBatch
from app.notify.models import NotifyChannel, NotifyDelivery, NotifyDestination, NotifyRoute
from app.series.arrivals import sample_arrival
from app.series.blocks import gpu_sample_block, nvlink_sample_block
from app.series.latest import SPECS as LATEST_SPECS  # the <raw>_latest tables
from app.series.minute_blocks import gpu_sample_1m_block
from app.series.rollups.models import rollup_watermark  # and the *_1m / *_1h rollup tables
from app.series.tables import (
    DiskSample,
    MountSample,
    NfsSample,
    NicPortSample,
    NvlinkSample,
    gpu_sample,
)
from app.topology.models import TopologyChange, TopologyDriftState, TopologySnapshot

__all__ = [
    "LATEST_SPECS",
    "AlertAck",
    "AlertEvent",
    "AlertInstance",
    "AlertRule",
    "AlertSilence",
    "DiskSample",
    "Gpu",
    "IngestBatch",
    "MountSample",
    "NfsSample",
    "NicPortSample",
    "Node",
    "NodeEvent",
    "NodeHealthState",
    "NodeToken",
    "NotifyChannel",
    "NotifyDelivery",
    "NotifyDestination",
    "NotifyRoute",
    "NvlinkSample",
    "Runbook",
    "TopologyChange",
    "TopologyDriftState",
    "TopologySnapshot",
    "gpu_sample",
    "gpu_sample_1m_block",
    "gpu_sample_block",
    "nvlink_sample_block",
    "rollup_watermark",
    "sample_arrival",
]

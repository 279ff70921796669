"""Imports every table module so ``Base.metadata`` is complete (for Alembic and the tests)."""

from app.auth.models import NodeToken
from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node
from app.ingest.models import IngestBatch
from app.metrics.models import gpu_sample
from app.nics.models import NicPortSample
from app.nvlinks.models import NvlinkSample
from app.storage.models import DiskSample, MountSample, NfsSample
from app.topology.models import TopologyChange, TopologySnapshot

__all__ = [
    "DiskSample",
    "Gpu",
    "IngestBatch",
    "MountSample",
    "NfsSample",
    "NicPortSample",
    "Node",
    "NodeEvent",
    "NodeToken",
    "NvlinkSample",
    "TopologyChange",
    "TopologySnapshot",
    "gpu_sample",
]

"""Imports every table module so ``Base.metadata`` is complete (for Alembic and the tests)."""

from app.auth.models import NodeToken
from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node
from app.ingest.models import IngestBatch
from app.metrics.models import gpu_sample

__all__ = ["Gpu", "IngestBatch", "Node", "NodeEvent", "NodeToken", "gpu_sample"]

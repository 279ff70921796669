"""One message of the delivery worker, copied out of the claim transaction (no database)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.notify.incident_messages import IncidentBatch


@dataclass
class Batch:
    """One message: all its rows in notice order (``row_ids``, ``payloads``), those claimed
    now (``claimed``) and the indexes of rows no longer waiting (``done``: their parts are not
    sent again). ``incident_id`` is set for one incident's rows on a channel that edits
    messages: the incident's message is posted or edited (:mod:`app.notify.incident_messages`,
    which reads ``incident`` while claiming); ``kinds`` are the rows' kinds."""

    channel_id: int
    group_key: str
    row_ids: list[int]
    payloads: list[dict[str, Any]]
    is_test: bool
    claimed: set[int] = field(default_factory=set)
    done: set[int] = field(default_factory=set)
    incident_id: int | None = None
    kinds: list[str] = field(default_factory=list)
    incident: IncidentBatch | None = None

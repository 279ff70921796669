"""Storing an accepted ingest batch: node and GPU inventory, samples, events, node sections,
topology, idempotency.

The whole batch is one transaction (the caller's). Policies are documented in ``docs/ingest.md``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, cast

import orjson
from pydantic import BaseModel
from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.errors import Conflict, Forbidden
from app.events.models import NodeEvent
from app.fleet import gpu_heartbeat, retire
from app.fleet.gpu_heartbeat import Heartbeat
from app.fleet.models import Gpu, Node
from app.health.rules import DEFAULT_RULES, HealthRules
from app.incidents import service as incidents_service
from app.ingest import body
from app.ingest import samples as sample_store
from app.ingest import sections as section_store
from app.ingest.gpu_schemas import MIG_BOUNDS, PROCESS_BOUNDS
from app.ingest.models import IngestBatch
from app.ingest.placeholders import placeholder_at
from app.ingest.rows import ParsedBatch, from_model
from app.ingest.schemas import GpuConflict, IngestBatchIn, IngestResult, LeftOut
from app.metrics.plausible import Bound, clean_numbers
from app.series import sinks
from app.series.writes import insert_staged
from app.topology import service as topology_service

log = logging.getLogger(__name__)


def store_batch(
    session: Session,
    *,
    node: Node,
    batch: IngestBatchIn | ParsedBatch,
    received_at: datetime,
    future_tolerance_s: float,
    retention_days: float,
    raw_retention_days: float | None = None,
    stale_after_s: float = 120.0,
    health_rules: HealthRules = DEFAULT_RULES,
    incident_quiet_s: float = 180.0,
    content_sha256: str | None = None,
    legacy_sha256: Callable[[], str] | None = None,
) -> IngestResult:
    """Store ``batch`` from the authenticated ``node``, or replay the answer of an earlier delivery.

    ``content_sha256`` identifies the batch's content apart from ``sent_at`` (see
    :func:`content_digest`): a re-sent batch id with the same content is a replay, with other
    content a conflict. ``legacy_sha256`` gives the digest as servers before the orjson one
    computed it (:func:`legacy_content_digest`), for a batch first stored by one of them.
    Samples and section readings older than ``raw_retention_days`` (default:
    ``retention_days``), events older than ``retention_days``, are refused as
    ``older_than_retention``. Stored fault events are grouped into the node's incidents
    (:func:`app.incidents.service.absorb`, by ``health_rules`` and ``incident_quiet_s``) in the
    same transaction.

    Returns:
        the counts of stored, duplicate and rejected samples (``replayed=True`` for a re-sent
        batch id, with the first delivery's counts).

    Raises:
        Forbidden: ``batch.node.hostname`` is not the token's node (compared without case, as
            DNS names are).
        Conflict: the batch id was used before for different content.
    """
    parsed = batch if isinstance(batch, ParsedBatch) else from_model(batch)
    head = parsed.head
    if head.node.hostname.lower() != node.hostname.lower():
        raise Forbidden(
            f"node.hostname {head.node.hostname!r} does not match this token's node "
            f"{node.hostname!r}"
        )
    if not _claim(session, node_id=node.id, batch_id=head.batch_id, received_at=received_at):
        # Stored before, or by a concurrent request that committed meanwhile: a replay.
        stored = session.get(IngestBatch, (node.id, head.batch_id), populate_existing=True)
        if stored is None:
            raise RuntimeError(f"batch {head.batch_id!r} neither stored nor claimable")
        return _replay(stored, content_sha256, legacy_sha256)

    skew_s = (head.sent_at - received_at).total_seconds()
    newest_allowed = received_at + timedelta(seconds=future_tolerance_s)
    oldest_allowed = received_at - timedelta(
        days=retention_days if raw_retention_days is None else raw_retention_days
    )
    oldest_event = received_at - timedelta(days=retention_days)
    nulled: Counter[str] = Counter(parsed.salvage.nulled)
    # A batch received before the newest one stored (its body took longer to arrive) says
    # nothing newer of the inventory: it may not undo a newer batch's GPU values or
    # ``missing`` marks, nor move a GPU's ``last_seen_at`` back (as the node's fields).
    stale = node.last_seen_at is not None and received_at < node.last_seen_at
    _update_node(node, batch=head, received_at=received_at, skew_s=skew_s)
    gpus, conflicts, applied = _upsert_gpus(
        session,
        node=node,
        batch=head,
        received_at=received_at,
        nulled=nulled,
        busy_since=received_at - timedelta(seconds=stale_after_s),
        left_out=parsed.salvage.gpu_values,
        stale=stale,
    )
    missing = [] if stale else _mark_missing_gpus(gpus, batch=head, received_at=received_at)
    sample_plan = sample_store.plan_samples(
        gpus=gpus,
        samples=parsed.samples,
        received_at=received_at,
        newest_allowed=newest_allowed,
        oldest_allowed=oldest_allowed,
        invalid=parsed.salvage.samples,
    )
    sections = section_store.plan_sections(
        node=node,
        gpus=gpus,
        sections=parsed.sections,
        newest_allowed=newest_allowed,
        oldest_allowed=oldest_allowed,
    )
    sections.rejected.update(parsed.salvage.rejected)
    with session.no_autoflush:  # node and GPU rows are written once, at the batch's end
        # One statement of index probes for every table: a sample or reading re-sent after
        # its block was packed is a duplicate, as against a raw row.
        packed = sinks.packed(
            session,
            {sinks.SAMPLES: sample_plan.rows.keys(), **section_store.keys_by_section(sections)},
        )
    sample_store.drop_packed(sample_plan, packed[sinks.SAMPLES])
    nulled.update(sample_plan.nulled)
    section_store.drop_packed(sections, packed, nulled)
    insert_staged(session, [sample_plan.staged, *sections.staged.values()])
    result = sample_store.samples_result(sample_plan)
    moved = sample_store.newest_stored(sample_plan, gpus=gpus)
    gpu_heartbeat.write(
        session,
        [
            replace(
                moved.get(gpu.id) or Heartbeat(gpu),
                seen_at=received_at if uuid in applied and received_at > gpu.last_seen_at else None,
            )
            for uuid, gpu in gpus.items()
        ],
    )
    newest = max((g.last_sample_at for g in gpus.values() if g.last_sample_at), default=None)
    if newest is not None and (node.last_sample_at is None or newest > node.last_sample_at):
        node.last_sample_at = newest
    events_stored, events_rejected = _store_events(
        session,
        node=node,
        gpus=gpus,
        batch=head,
        received_at=received_at,
        newest_allowed=newest_allowed,
        oldest_allowed=oldest_event,
        invalid=parsed.salvage.events,
    )
    if events_stored:
        incidents_service.absorb(
            session, node_id=node.id, rules=health_rules, quiet_s=incident_quiet_s, now=received_at
        )
    changed = None
    if head.topology is not None:
        changed = topology_service.record_topology(
            session,
            node=node,
            topology=head.topology,
            received_at=received_at,
            nulled=nulled,
            rejected=sections.rejected,
        )

    answer = IngestResult(
        batch_id=head.batch_id,
        received_at=received_at,
        clock_skew_s=round(skew_s, 3),
        events_stored=events_stored,
        events_rejected=events_rejected,
        gpu_conflicts=conflicts,
        gpus_missing=missing,
        content_sha256=content_sha256,
        nulled_values=dict(nulled),
        sections_stored=sections.stored,
        sections_rejected=dict(sections.rejected),
        topology_changed=changed,
        left_out=[
            LeftOut(loc=list(loc), reason=reason, action=action)
            for loc, reason, action in parsed.salvage.listed
        ],
        left_out_by_reason=dict(parsed.salvage.by_reason),
        **result,
    )
    session.flush()
    session.execute(
        _SET_ANSWER,
        {"node": node.id, "batch": head.batch_id, "result": answer.model_dump(mode="json")},
    )
    return answer


# Built once: constructing a statement and its cache key cost ~0.15 ms at every request.
# Core statements on the table: an ORM insert or update given parameters is a bulk operation.
_BATCHES = cast(Table, IngestBatch.__table__)
_SET_ANSWER = (
    update(_BATCHES)
    .where(_BATCHES.c.node_id == bindparam("node"), _BATCHES.c.batch_id == bindparam("batch"))
    .values(result=bindparam("result"))
)
_CLAIM = {
    dialect: insert(_BATCHES)
    .values(
        node_id=bindparam("node_id"),
        batch_id=bindparam("batch_id"),
        received_at=bindparam("received_at"),
        result=bindparam("result"),
    )
    .on_conflict_do_nothing(index_elements=["node_id", "batch_id"])
    .returning(_BATCHES.c.node_id)
    for dialect, insert in (("postgresql", pg_insert), ("sqlite", sqlite_insert))
}
_NODE_GPUS = select(Gpu).where(Gpu.node_id == bindparam("node_id"))


def _claim(session: Session, *, node_id: int, batch_id: str, received_at: datetime) -> bool:
    """Insert the batch's ``ingest_batch`` row (its answer filled in at the end); False when
    the id is taken. One ``INSERT … ON CONFLICT DO NOTHING RETURNING`` statement: a request
    storing the same batch at the same time holds the key until it commits or rolls back, so
    exactly one of them stores it (was a savepoint, an insert and a release per batch)."""
    values = {"node_id": node_id, "batch_id": batch_id, "received_at": received_at, "result": {}}
    return session.execute(_CLAIM[session.get_bind().dialect.name], values).first() is not None


def _update_node(node: Node, *, batch: IngestBatchIn, received_at: datetime, skew_s: float) -> None:
    retire.return_on_report(node)
    info = batch.node
    node.labels = dict(info.labels)
    node.agent_version = info.agent_version
    node.driver_version = info.driver_version
    node.cuda_version = info.cuda_version
    node.expected_gpu_count = info.expected_gpu_count
    node.first_seen_at = node.first_seen_at or received_at
    if node.last_seen_at is None or received_at >= node.last_seen_at:
        node.last_seen_at = received_at
        node.clock_skew_s = round(skew_s, 3)
        if batch.collection is not None:
            node.collector = batch.collection.collector
            node.collection_errors = [e.model_dump() for e in batch.collection.errors]


def _upsert_gpus(
    session: Session,
    *,
    node: Node,
    batch: IngestBatchIn,
    received_at: datetime,
    nulled: Counter[str],
    busy_since: datetime,
    left_out: Mapping[str, dict[str, str]] | None = None,
    stale: bool = False,
) -> tuple[dict[str, Gpu], list[GpuConflict], set[str]]:
    """The node's GPUs by UUID after applying the batch's inventory, the conflicts, and the
    UUIDs the batch reported and was allowed to (their ``last_seen_at`` is the batch's to move
    where newer: :mod:`app.fleet.gpu_heartbeat`). ``stale``: the batch was received before the
    node's newest; its values are not applied to GPUs already stored (new ones are added).
    ``left_out``: by UUID, the inventory fields the server left out of the batch and the values
    sent (:attr:`app.ingest.salvage.Salvage.gpu_values`).

    A UUID stored under another node moves to this one only when that node has not reported it
    since ``busy_since`` (the card was physically moved); otherwise it is a conflict (a token
    cannot take over another node's GPUs and their history), logged and left out. A new UUID at
    the PCI address of one of the node's placeholders (:mod:`app.ingest.placeholders`) takes
    that placeholder's row.
    """
    # No autoflush: the node's changes are written once, with its last_sample_at, at the end.
    with session.no_autoflush:
        by_uuid = {g.uuid: g for g in session.scalars(_NODE_GPUS, {"node_id": node.id})}
    conflicts: list[GpuConflict] = []
    refused: set[str] = set()
    wanted = [g.uuid for g in batch.gpus if g.uuid not in by_uuid]
    if wanted:
        for gpu in session.scalars(select(Gpu).where(Gpu.uuid.in_(wanted))):
            if gpu.last_seen_at >= busy_since:
                owner = session.get(Node, gpu.node_id)
                conflicts.append(GpuConflict(uuid=gpu.uuid, node=owner.hostname if owner else "?"))
                refused.add(gpu.uuid)
                continue
            log.warning("GPU %s moved to node %s", gpu.uuid, node.hostname)
            gpu.node_id = node.id
            by_uuid[gpu.uuid] = gpu
    reported = {g.uuid for g in batch.gpus}
    applied: set[str] = set()
    left_out = left_out or {}
    for info in batch.gpus:
        if info.uuid in refused:
            continue
        found = by_uuid.get(info.uuid)
        adopted = (
            None
            if found is not None
            else placeholder_at(by_uuid, pci_bus_id=info.pci_bus_id, reported=reported)
        )
        if adopted is not None:
            log.info("node %s: GPU %s is %s, read again", node.hostname, info.uuid, adopted.uuid)
            placeholder = adopted.uuid
            try:
                with session.begin_nested():  # another node may insert this UUID right now
                    adopted.uuid = info.uuid
                    session.flush()
            except IntegrityError:
                conflicts.append(GpuConflict(uuid=info.uuid, node="(being added by another node)"))
                continue
            del by_uuid[placeholder]
            found = by_uuid[info.uuid] = adopted
        dropped = left_out.get(info.uuid)
        if found is None:
            gpu = Gpu(
                uuid=info.uuid, node_id=node.id, first_seen_at=received_at, last_seen_at=received_at
            )
            try:
                with session.begin_nested():  # another node may insert this UUID right now
                    _apply_gpu_info(gpu, info, nulled=nulled)
                    gpu.implausible_inventory = dropped
                    session.add(gpu)
                    session.flush()
            except IntegrityError:
                conflicts.append(GpuConflict(uuid=info.uuid, node="(being added by another node)"))
                continue
            by_uuid[info.uuid] = gpu
        elif not stale:
            _apply_gpu_info(found, info, nulled=nulled)
            _assign(found, "implausible_inventory", dropped)
        applied.add(info.uuid)
    for conflict in conflicts:
        log.warning(
            "node %s reports GPU %s, which node %s reports: not taken over",
            node.hostname,
            conflict.uuid,
            conflict.node,
        )
    # Not written here: each GPU's last_seen_at goes out with its last_sample_at in one
    # statement at the batch's end (new GPUs were flushed above, so every GPU has its id).
    return by_uuid, conflicts, applied


def _apply_gpu_info(gpu: Gpu, info: Any, *, nulled: Counter[str]) -> None:
    """Copy one ``gpus[]`` entry onto the stored GPU, assigning only the values that changed
    (an unchanged GPU then has nothing for the session's flush to compare or write; its
    ``last_seen_at`` goes with :mod:`app.fleet.gpu_heartbeat`)."""
    _assign(gpu, "index", info.index)
    _assign(gpu, "name", info.name)
    _assign(gpu, "pci_bus_id", info.pci_bus_id)
    _assign(gpu, "mem_total_bytes", info.mem_total_bytes)
    _assign(gpu, "mig_mode", info.mig_mode)
    _assign(gpu, "state", info.state)
    _assign(gpu, "state_reason", info.state_reason)
    _assign(gpu, "unavailable", dict(info.unavailable) if info.unavailable is not None else None)
    mig = _clean_list(info.mig_instances, MIG_BOUNDS, "mig_instances", nulled)
    _assign(gpu, "mig_instances", mig)
    _assign(gpu, "processes", _clean_list(info.processes, PROCESS_BOUNDS, "processes", nulled))


def _assign(row: Any, name: str, value: Any) -> None:
    """``row.<name> = value`` unless it holds an equal value already."""
    if getattr(row, name) != value:
        setattr(row, name, value)


def _mark_missing_gpus(
    gpus: dict[str, Gpu], *, batch: IngestBatchIn, received_at: datetime
) -> list[str]:
    """GPUs stored for the node (``gpus``: every GPU of the node after
    :func:`_upsert_gpus`) but absent from a non-empty ``gpus`` list get state ``missing`` (a
    GPU that fell off the bus can vanish from NVML's device list entirely); returns their
    UUIDs. An empty list says nothing: an agent without a driver reports no inventory."""
    if not batch.gpus:
        return []
    present = {g.uuid for g in batch.gpus}
    missing = []
    for gpu in sorted(gpus.values(), key=lambda g: g.id):
        if gpu.uuid in present:
            continue
        missing.append(gpu.uuid)
        if gpu.state != "missing":
            gpu.state = "missing"
            gpu.state_reason = f"not in the agent's GPU list since {received_at:%Y-%m-%d %H:%M:%SZ}"
    return missing


def _replay(
    stored: IngestBatch, content_sha256: str | None, legacy_sha256: Callable[[], str] | None
) -> IngestResult:
    """The first delivery's answer for a re-sent batch id.

    Raises:
        Conflict: the stored batch had other content.
    """
    first = stored.result.get("content_sha256")
    if (
        first
        and content_sha256
        and first != content_sha256
        and (legacy_sha256 is None or first != legacy_sha256())
    ):
        raise Conflict(
            f"batch_id {stored.batch_id!r} was already used for a batch with different content; "
            "a new batch needs a new batch_id"
        )
    return IngestResult.model_validate({**stored.result, "replayed": True})


def content_digest(document: Any, *, finite: bool = False, text: bytes | None = None) -> str:
    """SHA-256 of a batch document without ``sent_at`` (which the agent restamps at each send
    attempt), keys sorted: equal for a faithful re-send, different for other content.

    Written by orjson (:func:`app.ingest.body.canonical`), unless the document holds what
    orjson cannot write faithfully (NaN or ±inf, which it writes as ``null``; a lone surrogate;
    an integer beyond 64 bits): then as :func:`legacy_content_digest`. Which of the two depends
    on the content alone, so a re-send gets the same digest however it is spelled. ``finite``:
    the caller knows the document has no NaN or ±inf (orjson parsed it), which spares a walk
    through it. ``text``: the document's :func:`~app.ingest.body.canonical` form where the
    caller has it already.
    """
    if text is None:
        if not finite and _has_non_finite(body.without_sent_at(document)):
            return legacy_content_digest(document)
        try:
            text = body.canonical(document)
        except orjson.JSONEncodeError:
            return legacy_content_digest(document)
    return hashlib.sha256(text).hexdigest()


def legacy_content_digest(document: Any) -> str:
    """:func:`content_digest` as ``json.dumps`` writes the document (servers before the orjson
    digest stored these; floats such as ``1e-05`` are spelled differently by orjson)."""
    text = json.dumps(
        body.without_sent_at(document), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _has_non_finite(document: Any) -> bool:
    stack = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                return True
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _clean_list(
    entries: list[Any] | None, bounds: dict[str, Bound], prefix: str, nulled: Counter[str]
) -> list[dict[str, Any]] | None:
    """JSON-ready dicts of ``entries`` (pydantic models) with implausible numbers nulled."""
    if entries is None:
        return None
    items: list[BaseModel] = entries
    return [
        clean_numbers(item.model_dump(mode="json"), bounds, prefix=prefix, nulled=nulled)
        for item in items
    ]


def _store_events(
    session: Session,
    *,
    node: Node,
    gpus: dict[str, Gpu],
    batch: IngestBatchIn,
    received_at: datetime,
    newest_allowed: datetime,
    oldest_allowed: datetime,
    invalid: int = 0,
) -> tuple[int, dict[str, int]]:
    """Store every event as its own row; returns (stored, rejected by reason).

    Events dated beyond the future tolerance are rejected (``occurred_at_in_future``) like
    samples: otherwise a wrong clock pins them at the top of every "recent events" list for
    years. Events older than retention are rejected too (``older_than_retention``). ``invalid``
    events were left out of the batch for a bad value (:mod:`app.ingest.salvage`).
    """
    by_bus = {g.pci_bus_id.lower(): g for g in gpus.values() if g.pci_bus_id}
    rejected: Counter[str] = Counter(invalid=invalid) if invalid else Counter()
    stored = 0
    for event in batch.events:
        if event.occurred_at > newest_allowed:
            rejected["occurred_at_in_future"] += 1
            continue
        if event.occurred_at < oldest_allowed:
            rejected["older_than_retention"] += 1
            continue
        gpu = gpus.get(event.gpu_uuid) if event.gpu_uuid else None
        if gpu is None and event.pci_bus_id:
            gpu = by_bus.get(event.pci_bus_id.lower())
        session.add(
            NodeEvent(
                node_id=node.id,
                gpu_id=gpu.id if gpu else None,
                occurred_at=event.occurred_at,
                received_at=received_at,
                kind=event.kind,
                xid=event.xid,
                pci_bus_id=event.pci_bus_id,
                message=event.message[:4096] if event.message else event.message,
                test=event.test,
            )
        )
        stored += 1
    session.flush()
    return stored, dict(rejected)

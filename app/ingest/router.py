"""``POST /api/v1/ingest``: the agents' door into the server."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from app import wakeups
from app.alerts import triggers as alert_triggers
from app.auth import service as auth_service
from app.db import session_scope, utcnow
from app.exporter import counters
from app.fleet.models import Node
from app.gc_tuning import without_collection
from app.ingest import body
from app.ingest import service as ingest_service
from app.ingest.fields import clean_document
from app.ingest.rows import ParsedBatch, parse_batch
from app.ingest.schemas import IngestBatchIn, IngestResult

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1", tags=["ingest"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, malformed, unknown or revoked bearer token"},
    403: {"description": "The token belongs to another node than `node.hostname`"},
    409: {"description": "The batch_id was used before for a batch with different content"},
    413: {"description": "Body over the size limit, before or after gzip decompression"},
    415: {"description": "Not application/json (UTF-8), or an encoding other than gzip"},
    400: {"description": "Invalid gzip, UTF-8 or JSON"},
    422: {
        "description": "The batch does not match the schema where no value may be left out "
        "(the top-level shape, schema_version, batch_id, sent_at, node.hostname, labels as a "
        "whole, a list over its limit, a table-form list without exactly `fields` and `rows`); "
        "one bad value or entry elsewhere is left out alone and "
        "listed in `left_out` (docs/ingest.md). `loc` names the field"
    },
}


@router.post(
    "/ingest",
    response_model=IngestResult,
    responses=_ERRORS,
    summary="Push a batch of GPU samples and events (payload schema version 1)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": IngestBatchIn.model_json_schema()}},
            "description": "Optionally gzip-compressed (`Content-Encoding: gzip`). `samples` "
            "and the dated node sections may each be sent in the table form, "
            '`{"fields": [names], "rows": [[values in that order], ...]}` '
            "(`bulk_forms` in the answer). See docs/ingest.md for policies.",
        }
    },
)
async def ingest(
    request: Request,
    authorization: Annotated[str | None, Header()] = None,
) -> IngestResult:
    """Authenticate, read and validate a batch, then store it in one transaction.

    A re-sent ``batch_id`` gets the first delivery's answer with ``replayed: true``.
    """
    started = time.perf_counter()
    try:
        result = await _answer(request, authorization)
    except Exception as exc:
        counters.batch_refused(exc)
        raise
    counters.batch_accepted(
        replayed=result.replayed,
        rejected_by_reason=result.rejected_by_reason,
        seconds=time.perf_counter() - started,
        events_rejected=result.events_rejected,
        left_out_by_reason=result.left_out_by_reason,
    )
    return result


async def _answer(request: Request, authorization: str | None) -> IngestResult:
    """:func:`ingest`'s work: the answer to the batch, or the error that refuses it."""
    settings = request.app.state.settings
    factory = request.app.state.session_factory

    def _auth() -> int:
        with session_scope(request.app.state.token_session_factory) as session:
            return auth_service.authenticate(session, authorization=authorization)

    received_at = utcnow()  # before reading: the agent's sent_at is compared with this
    node_id = await run_in_threadpool(_auth)
    body.check_content_type(request)
    raw = await body.read_limited(request, max_bytes=settings.ingest_max_bytes)
    encoding = request.headers.get("content-encoding", "identity")
    # Inflating, parsing and validating a large batch takes CPU seconds: off the event loop.
    # The collector is off from here until the batch is stored (app/gc_tuning.py): its young
    # collections walked every batch in flight, a quarter of the server's CPU under load.
    batch, digest, legacy = await run_in_threadpool(
        _parse, raw, encoding, settings.ingest_max_bytes
    )

    peers = not request.app.state.runs_jobs

    def _store() -> IngestResult:
        with session_scope(factory) as session:
            # The node row is locked first (FOR NO KEY UPDATE: the lock the batch's update of
            # it takes at the end anyway), so concurrent batches of one node queue here instead
            # of deadlocking over the current-state rows they upsert and that update.
            node = session.get_one(Node, node_id, with_for_update={"key_share": True})
            stored = ingest_service.store_batch(
                session,
                node=node,
                batch=batch,
                received_at=received_at,
                future_tolerance_s=settings.future_tolerance_s,
                retention_days=settings.retention_days,
                raw_retention_days=settings.raw_retention_days,
                stale_after_s=settings.stale_after_s,
                health_rules=request.app.state.health_rules,
                incident_quiet_s=settings.incident_quiet_s,
                content_sha256=digest,
                legacy_sha256=legacy,
            )
            if peers and not stored.replayed:
                # The jobs run in another process (fleetwatch worker): NOTIFY it in this
                # transaction, delivered at commit (a connection per NOTIFY after the commit
                # doubled the pool checkouts of every batch at 1,000 nodes).
                wakeups.signal_on_commit(session, wakeups.INGEST_CHANNEL)
                if alert_triggers.batch_wakes_alerts(batch, stored):
                    payload = alert_triggers.wake_payload([node.id])
                    wakeups.signal_on_commit(session, wakeups.ALERTS_CHANNEL, payload)
            return stored

    result = await run_in_threadpool(without_collection(_store))
    refresher = getattr(request.app.state, "health_refresher", None)
    if refresher is not None and not result.replayed:
        refresher.wake()  # committed: the node's health is evaluated within the debounce
    evaluator = getattr(request.app.state, "alert_evaluator", None)
    wakes_alerts = alert_triggers.batch_wakes_alerts(batch, result)
    if evaluator is not None and wakes_alerts:
        evaluator.wake([node_id])  # event and GPU-state rules of this node now
    return result


@without_collection
def _parse(raw: bytes, encoding: str, max_bytes: int) -> tuple[ParsedBatch, str, Callable[[], str]]:
    """Decode and validate a body; returns the batch, its content digest and a function giving
    the digest as earlier servers computed it.

    Raises:
        BadRequest, PayloadTooLarge: from :func:`app.ingest.body.decode`.
        RequestValidationError: the document does not match the schema (``loc`` from ``body``).
    """
    decoded = body.decode(raw, encoding=encoding, max_bytes=max_bytes)
    document = decoded.document
    digest = ingest_service.content_digest(document, finite=decoded.fast, text=decoded.canonical)

    def legacy() -> str:
        return ingest_service.legacy_content_digest(document)

    try:
        cleaned = document if decoded.plain else clean_document(document)
        return parse_batch(cleaned), digest, legacy
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        for err in errors:
            err["loc"] = ("body", *err["loc"])
        raise RequestValidationError(errors) from None

"""``/healthz`` and ``/readyz``: the probes of a load balancer, Kubernetes or Docker.

- ``GET /healthz`` (liveness): the process answers HTTP; it touches no database, so a database
  outage never gets healthy servers restarted. ``200 {"status": "ok", "version": …}``.
- ``GET /readyz`` (readiness): the database answers and its schema is at the newest migration
  this server knows. ``200 {"status": "ready", "version", "schema": [revision, …]}``, else
  ``503 {"status": "not ready", "check": "database" | "schema", "reason": …}``, the reason
  naming what is wrong and what to do (the database that does not answer and why, or the
  revision found against the one needed).

A check runs in a thread with :data:`READY_TIMEOUT_S` to answer; probes that arrive while one is
running wait for that one, so a database that hangs holds one thread, never one per probe.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import cache
from typing import Any

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from app import __version__
from app.migrate import alembic_config

router = APIRouter(include_in_schema=False)

#: Seconds the database has to answer a readiness check (Kubernetes' probe timeout is longer).
READY_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Readiness:
    """The outcome of one check: ``check`` is ``None`` when ready, else the part that failed
    (``database`` or ``schema``) with ``reason``; ``schema`` the revisions found."""

    check: str | None
    reason: str = ""
    schema: tuple[str, ...] = ()


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: this process answers."""
    return {"status": "ok", "version": __version__}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Readiness: 200 when the database answers and is at the newest schema, else 503."""
    state = request.app.state
    engine: Engine | None = getattr(state, "engine", None)
    if engine is None:  # the lifespan has not opened the database (yet)
        result = Readiness("database", "the server has not opened its database yet")
    else:
        running: asyncio.Future[Readiness] | None = getattr(state, "readiness_check", None)
        if running is None or running.done():
            running = asyncio.ensure_future(asyncio.to_thread(check_readiness, engine))
            state.readiness_check = running
        try:
            result = await asyncio.wait_for(asyncio.shield(running), READY_TIMEOUT_S)
        except TimeoutError:
            result = Readiness(
                "database",
                f"database {_display(engine)} did not answer within {READY_TIMEOUT_S:g} s",
            )
    if result.check is None:
        return JSONResponse(
            {"status": "ready", "version": __version__, "schema": list(result.schema)}
        )
    body: dict[str, Any] = {
        "status": "not ready",
        "version": __version__,
        "check": result.check,
        "reason": result.reason,
    }
    if result.schema:
        body["schema"] = list(result.schema)
    return JSONResponse(body, status_code=503)


def check_readiness(engine: Engine) -> Readiness:
    """One round trip: ``SELECT 1`` and the Alembic revisions stored, compared with the heads
    of ``migrations/``. Never raises: a database error is a :class:`Readiness` saying so."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            current = tuple(sorted(MigrationContext.configure(conn).get_current_heads()))
    except SQLAlchemyError as exc:
        orig = getattr(exc, "orig", None)  # the driver's own error, without SQLAlchemy's notes
        first_line = str(orig if orig is not None else exc).strip()
        first_line = first_line.splitlines()[0] if first_line else ""
        return Readiness(
            "database",
            f"database {_display(engine)} does not answer: {type(exc).__name__}: {first_line}",
        )
    script = _script_directory()
    heads = tuple(sorted(script.get_heads()))
    if current == heads:
        return Readiness(None, schema=current)
    if not current:
        reason = "the database has no schema: run 'fleetwatch migrate'"
    elif all(_known(script, rev) for rev in current):
        reason = (
            f"the database schema is at {', '.join(current)}, this server needs "
            f"{', '.join(heads)}: run 'fleetwatch migrate'"
        )
    else:
        reason = (
            f"the database schema is at {', '.join(current)}, which this server's migrations "
            f"(newest {', '.join(heads)}) do not know: a newer Fleetwatch migrated it; run that "
            "version here"
        )
    return Readiness("schema", reason, current)


@cache
def _script_directory() -> ScriptDirectory:
    """The migrations' script directory, read once per process (the files do not change while
    it runs; the URL plays no part in it)."""
    return ScriptDirectory.from_config(alembic_config("sqlite://"))


def _known(script: ScriptDirectory, revision: str) -> bool:
    try:
        return script.get_revision(revision) is not None
    except Exception:  # alembic raises its own errors for an unknown revision id
        return False


def _display(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)

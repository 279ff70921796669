"""The app factory of ``fleetwatch serve --workers N``: each of uvicorn's worker processes
builds its own app from the environment (the serve command exports what its options set), with
no background jobs — one ``fleetwatch worker`` process beside them runs those, and the web
processes wake it through Postgres ``NOTIFY`` (:mod:`app.wakeups`). Several processes share the
one listening socket, so ingest and pages use every core, not one (the GIL)."""

from __future__ import annotations

from fastapi import FastAPI

from app.config import get_settings
from app.main import create_app


def app_factory() -> FastAPI:
    """A web process's app: the settings of the environment, no jobs."""
    return create_app(get_settings(), run_jobs=False)

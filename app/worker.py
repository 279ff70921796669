"""``fleetwatch worker``: the background jobs of a server — health refresher, alert evaluator,
notification worker, rollups, compaction, retention, drift — in a process that serves no HTTP.

Beside web processes started with ``fleetwatch serve --no-jobs`` (Postgres only): the pages'
latency no longer shares an interpreter (and its lock) with seconds of evaluation per tick, and
the web processes tell the worker about new batches with ``NOTIFY`` (:mod:`app.wakeups`). The
jobs are the ones :func:`app.main.create_app` starts, run through the same lifespan; each still
runs once per database (advisory locks), so several workers are safe too.
"""

from __future__ import annotations

import asyncio
import threading

from app.config import Settings
from app.main import create_app


def run_worker(settings: Settings, stop: threading.Event) -> list[str]:
    """Start the jobs for ``settings`` and keep them running until ``stop`` is set. Returns
    the ids of the jobs still running when the stop's drain gave up on them (``[]``: none).

    Raises:
        app.main.SchemaNotMigrated: the database is not at the newest migration.
    """
    app = create_app(settings, run_jobs=True)

    async def main() -> None:
        async with app.router.lifespan_context(app):
            await asyncio.to_thread(stop.wait)

    asyncio.run(main())
    return list(getattr(app.state, "jobs_left_running", []))

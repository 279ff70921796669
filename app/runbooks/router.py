"""JSON API of runbooks: ``GET /api/v1/runbooks``, ``GET/PUT/DELETE /api/v1/runbooks/{name}``
(DELETE reverts to the file); the HTML pages (:mod:`app.runbooks.pages`) are included here so
``app.main`` registers one router."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request, Response

from app.db import SessionDep, WriteSessionDep
from app.runbooks import pages, teams
from app.runbooks import service as runbook_service
from app.runbooks.schemas import RunbookIn, RunbookOut

router = APIRouter()
api = APIRouter(prefix="/api/v1", tags=["runbooks"])


def runbooks_dir(request: Request) -> Path:
    """The folder of runbook files (``FLEETWATCH_RUNBOOKS_DIR``)."""
    folder: Path = request.app.state.settings.runbooks_dir
    return folder


@api.get("/runbooks", response_model=list[RunbookOut], summary="Every runbook")
def list_runbooks(request: Request, session: SessionDep) -> list[RunbookOut]:
    """Runbook files and UI edits, by name (an edit hides its file)."""
    docs = runbook_service.list_runbooks(session, runbooks_dir=runbooks_dir(request))
    return [RunbookOut.of(d) for d in docs]


@api.get("/runbooks/{name}", response_model=RunbookOut, summary="One runbook's Markdown")
def get_runbook(request: Request, session: SessionDep, name: str) -> RunbookOut:
    """The Markdown in force for ``name``; 400 naming ``name`` for a bad name, 404 if none."""
    doc = runbook_service.get_runbook(session, runbooks_dir=runbooks_dir(request), name=name)
    return RunbookOut.of(doc)


@api.put("/runbooks/{name}", response_model=RunbookOut, summary="Edit (or create) a runbook")
def put_runbook(
    request: Request, session: WriteSessionDep, name: str, body: RunbookIn
) -> RunbookOut:
    """Store ``markdown`` as the runbook's edit (the file is left as it is)."""
    runbook_service.check_name(name)
    team = teams.choose_team(request, session, name=name, given=body.team)
    doc = runbook_service.save_runbook(
        session, runbooks_dir=runbooks_dir(request), name=name, markdown=body.markdown, team=team
    )
    return RunbookOut.of(doc)


@api.delete("/runbooks/{name}", summary="Revert a runbook to its file")
def revert_runbook(request: Request, session: WriteSessionDep, name: str) -> Response:
    """Drop the UI edit: 200 with the file's runbook, 204 when no file remains, 404 when
    there was no edit."""
    doc = runbook_service.revert_runbook(session, runbooks_dir=runbooks_dir(request), name=name)
    if doc is None:
        return Response(status_code=204)
    return Response(RunbookOut.of(doc).model_dump_json(), media_type="application/json")


router.include_router(api)
router.include_router(pages.router)

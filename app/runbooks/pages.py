"""HTML pages of runbooks: ``/runbooks`` (list), ``/runbooks/{name}`` (rendered; ``?alert=ID``
fills in that alert's values), ``/runbooks/{name}/edit`` (textarea, htmx preview, save, revert)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app import forms
from app.db import SessionDep, WriteSessionDep
from app.errors import BadRequest, NotFound
from app.runbooks import service as runbook_service
from app.runbooks import teams
from app.runbooks.context import RunbookContext, context_for_alert
from app.runbooks.render import render_markdown
from app.runbooks.service import MAX_MARKDOWN_CHARS, RunbookDoc
from app.web import render
from app.whole_numbers import parse_whole

router = APIRouter(include_in_schema=False)

AlertParam = Annotated[str | None, Query(alias="alert")]
MAX_FORM_BYTES = 4 * MAX_MARKDOWN_CHARS


async def read_form(request: Request) -> dict[str, str]:
    """FastAPI dependency: the form's fields, first value each (see :func:`app.forms.read_form`
    for the limits and errors)."""
    return (await forms.parse_form(request, max_bytes=MAX_FORM_BYTES)).first()


FormDep = Annotated[dict[str, str], Depends(read_form)]


def _folder(request: Request) -> Path:
    folder: Path = request.app.state.settings.runbooks_dir
    return folder


def _alert_context(session: Session, alert: str | None) -> RunbookContext | None:
    if alert is None or alert.strip() == "":
        return None
    alert_id = parse_whole(alert, low=0, high=10**12)
    if alert_id is None:
        raise BadRequest(f"alert: expected an alert id (a whole number), got {alert[:40]!r}")
    return context_for_alert(session, alert_id=alert_id)


def _url(name: str, suffix: str = "") -> str:
    return f"/runbooks/{quote(name, safe='')}{suffix}"


@router.get("/runbooks", response_class=HTMLResponse)
def runbooks_page(request: Request, session: SessionDep) -> HTMLResponse:
    """Every runbook with its title and source (file, or edited in the UI)."""
    docs = runbook_service.list_runbooks(session, runbooks_dir=_folder(request))
    return render(request, "runbooks/list.html", {"nav": "runbooks", "docs": docs})


@router.get("/runbooks/{name}", response_class=HTMLResponse)
def runbook_page(
    request: Request, session: SessionDep, name: str, alert: AlertParam = None
) -> HTMLResponse:
    """One runbook rendered; with ``?alert=ID`` filled in with that alert's values (404 for an
    unknown alert, 400 naming ``alert`` for a non-number). An unknown runbook is a 404 page
    with a link to write it."""
    runbook_service.check_name(name)
    context = _alert_context(session, alert)
    try:
        doc = runbook_service.get_runbook(session, runbooks_dir=_folder(request), name=name)
    except NotFound:
        return render(
            request,
            "runbooks/missing.html",
            {"nav": "runbooks", "name": name, "edit_url": _url(name, "/edit")},
            status_code=404,
        )
    rendered = runbook_service.render_doc(doc, context)
    return render(
        request,
        "runbooks/page.html",
        {
            "nav": "runbooks",
            "doc": doc,
            "rendered": rendered,
            "context": context,
            "alert_id": context.alert.get("id") if context else None,
            "edit_url": _url(name, "/edit") + (f"?alert={context.alert['id']}" if context else ""),
        },
    )


def _edit_page(
    request: Request,
    doc: RunbookDoc | None,
    name: str,
    markdown: str,
    error: str | None,
    alert_id: int | None = None,
) -> HTMLResponse:
    return render(
        request,
        "runbooks/edit.html",
        {
            "nav": "runbooks",
            "name": name,
            "alert_id": alert_id,
            "doc": doc,
            "markdown": markdown,
            "error": error,
            "view_url": _url(name),
            "edit_url": _url(name, "/edit"),
            "preview_url": _url(name, "/preview"),
            "revert_url": _url(name, "/revert"),
        },
        status_code=400 if error else 200,
    )


@router.get("/runbooks/{name}/edit", response_class=HTMLResponse)
def edit_page(
    request: Request, session: SessionDep, name: str, alert: AlertParam = None
) -> HTMLResponse:
    """The editor: the Markdown in force (empty for a new runbook), preview (with ``?alert=ID``
    filled in with that alert's values), save, revert."""
    runbook_service.check_name(name)
    context = _alert_context(session, alert)
    try:
        doc = runbook_service.get_runbook(session, runbooks_dir=_folder(request), name=name)
    except NotFound:
        doc = None
    alert_id = context.alert.get("id") if context else None
    return _edit_page(request, doc, name, doc.markdown if doc else "", None, alert_id)


@router.post("/runbooks/{name}/edit", response_class=HTMLResponse)
def save(request: Request, session: WriteSessionDep, name: str, form: FormDep) -> Response:
    """Store the form's ``markdown`` as the runbook's edit, then show the runbook (303); an
    empty or oversized text re-shows the editor with the error (400)."""
    runbook_service.check_name(name)
    markdown = form.get("markdown", "")
    given = form.get("team", "").strip()[:128] or None
    team = teams.choose_team(request, session, name=name, given=given)
    try:
        runbook_service.save_runbook(
            session, runbooks_dir=_folder(request), name=name, markdown=markdown, team=team
        )
    except BadRequest as exc:
        try:
            doc = runbook_service.get_runbook(session, runbooks_dir=_folder(request), name=name)
        except NotFound:
            doc = None
        return _edit_page(request, doc, name, markdown, exc.detail)
    return RedirectResponse(_url(name), status_code=303)


@router.post("/runbooks/{name}/revert", response_class=HTMLResponse)
def revert(request: Request, session: WriteSessionDep, name: str) -> Response:
    """Drop the UI edit (303 to the file's runbook, or to the list when no file remains)."""
    doc = runbook_service.revert_runbook(session, runbooks_dir=_folder(request), name=name)
    return RedirectResponse(_url(name) if doc else "/runbooks", status_code=303)


@router.post("/runbooks/{name}/preview", response_class=HTMLResponse)
def preview(request: Request, session: SessionDep, name: str, form: FormDep) -> HTMLResponse:
    """The form's ``markdown`` rendered (htmx partial for the editor): with the values of the
    alert in the form's ``alert`` field, else with placeholders."""
    runbook_service.check_name(name)
    markdown = form.get("markdown", "")
    if len(markdown) > MAX_MARKDOWN_CHARS:
        raise BadRequest(f"markdown: longer than {MAX_MARKDOWN_CHARS:,} characters")
    context = _alert_context(session, form.get("alert"))
    out = render_markdown(markdown, context.template_vars() if context else None)
    return render(request, "runbooks/_preview.html", {"html": out.html, "warnings": out.warnings})

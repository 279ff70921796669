"""``POST /nodes/{hostname}/retire`` and ``…/return``: the node page's forms for
:mod:`app.fleet.retire` (each answered by a redirect to the node page)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse

from app.db import WriteSessionDep
from app.errors import BadRequest
from app.fleet import retire
from app.forms import Form, read_form
from app.viewer_time import tz_query

router = APIRouter(include_in_schema=False)


def _back(request: Request, hostname: str) -> RedirectResponse:
    tz = tz_query(request)
    path = f"/nodes/{quote(hostname, safe='')}"
    return RedirectResponse(f"{path}{'?' + tz if tz else ''}", status_code=303)


@router.post("/nodes/{hostname}/retire")
def retire_node(
    request: Request,
    session: WriteSessionDep,
    hostname: str,
    form: Annotated[Form, Depends(read_form)],
) -> RedirectResponse:
    """Retire the node with the form's ``reason`` (400 naming ``reason`` when it is empty or
    too long; 404 for an unknown node)."""
    try:
        retire.retire(session, hostname=hostname, reason=form.one("reason"))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return _back(request, hostname)


@router.post("/nodes/{hostname}/return")
def return_node(request: Request, session: WriteSessionDep, hostname: str) -> RedirectResponse:
    """Return the retired node to the fleet (404 for an unknown node)."""
    retire.return_to_service(session, hostname=hostname)
    return _back(request, hostname)

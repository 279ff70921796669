"""Which team a runbook edit belongs to: the team the request names; else the edit's team as
stored (an edit keeps its team); else the caller's team when it acts for exactly one; else
none (shared). A file alone is shared. The caller must act for the team chosen."""

from __future__ import annotations

from fastapi import Request
from sqlalchemy.orm import Session

from app.access.middleware import require_team, sole_team
from app.errors import BadRequest
from app.runbooks import service as runbook_service


def choose_team(request: Request, session: Session, *, name: str, given: str | None) -> str | None:
    """The team runbook ``name``'s edit is saved with.

    Raises:
        Forbidden: the caller does not act for ``given``.
    """
    if given is not None and (
        len(given) > 128 or any(ord(c) < 0x20 or ord(c) == 0x7F for c in given)
    ):
        raise BadRequest("team: at most 128 characters, no control characters")
    team = given or runbook_service.edit_team(session, name=name) or sole_team(request)
    require_team(request, team)
    return team

"""Which team a new silence belongs to, and the check that the caller may give it that team.

The owning team decides who may expire the silence (responders of that team, admins, every-team
tokens; a shared silence, ``team`` ``None``, any responder). Chosen in this order:

1. the ``team`` the request names;
2. else the team of the rules the matchers select by ``alertname``, when they are all of one
   team (:func:`app.alerts.service.silence_rules_team`);
3. else the caller's team when it acts for exactly one;
4. else none: shared.

Whatever the choice, a caller who does not act for the rules' team (2.) cannot silence them:
a responder of team A cannot mute team B's rules by naming team A.
"""

from __future__ import annotations

from fastapi import Request
from sqlalchemy.orm import Session

from app.access.middleware import require_team, sole_team
from app.alerts import service as alert_service
from app.errors import BadRequest


def choose_team(
    request: Request, session: Session, *, given: str | None, matchers: list[dict[str, str]]
) -> str | None:
    """The new silence's team (see the module's order).

    Raises:
        Forbidden: the caller acts neither for the matched rules' team nor for ``given``.
    """
    of_rules = alert_service.silence_rules_team(session, matchers=matchers)
    if of_rules is not None:
        require_team(request, of_rules)
    if given is not None and (
        len(given) > 128 or any(ord(c) < 0x20 or ord(c) == 0x7F for c in given)
    ):
        raise BadRequest("team: at most 128 characters, no control characters")
    team = given or of_rules or sole_team(request)
    require_team(request, team)
    return team

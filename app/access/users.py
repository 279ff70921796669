"""Users and teams: creation, lookup, passwords and team membership."""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.access.models import Team, User, user_team
from app.access.roles import Role
from app.access.secrets import hash_password
from app.db import utcnow
from app.errors import BadRequest, Conflict, NotFound

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
MIN_PASSWORD_CHARS = 12


def check_name(kind: str, name: str) -> str:
    """``name`` when it is 1–64 characters of letters, digits, ``. _ @ -`` (not starting with a
    punctuation mark).

    Raises:
        BadRequest: otherwise, naming ``kind`` (user, team, token).
    """
    if not NAME_RE.fullmatch(name):
        raise BadRequest(
            f"{kind} name {name[:80]!r} must be 1-64 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_password(password: str) -> str:
    """``password`` when it has at least :data:`MIN_PASSWORD_CHARS` characters.

    Raises:
        BadRequest: too short.
    """
    if len(password) < MIN_PASSWORD_CHARS:
        raise BadRequest(f"password must have at least {MIN_PASSWORD_CHARS} characters")
    return password


def get_or_create_team(session: Session, name: str) -> Team:
    """The team named ``name``, created when new.

    Raises:
        BadRequest: not a valid team name.
    """
    check_name("team", name)
    team = session.scalars(select(Team).where(Team.name == name)).one_or_none()
    if team is None:
        team = Team(name=name, created_at=utcnow())
        session.add(team)
        session.flush()
    return team


def get_team(session: Session, name: str) -> Team:
    """The team named ``name``.

    Raises:
        NotFound: no such team.
    """
    team = session.scalars(select(Team).where(Team.name == name)).one_or_none()
    if team is None:
        raise NotFound(f"no team named {name!r}")
    return team


def list_teams(session: Session) -> list[Team]:
    """Every team, by name."""
    return list(session.scalars(select(Team).order_by(Team.name)))


def create_user(
    session: Session,
    *,
    name: str,
    role: Role,
    teams: Sequence[str] = (),
    password: str | None = None,
) -> tuple[User, str]:
    """Create a local user with ``role``, member of ``teams`` (created when new).

    Returns:
        the user and its password: ``password`` when given, else a generated one-time password
        (shown once; only its hash is stored).

    Raises:
        BadRequest: invalid name, team name or a password too short. Conflict: name taken.
    """
    check_name("user", name)
    if session.scalars(select(User.id).where(User.name == name)).first() is not None:
        raise Conflict(f"a user named {name!r} exists")
    if password is None:
        password = secrets.token_urlsafe(15)
    check_password(password)
    user = User(
        name=name,
        role=role.name,
        password_hash=hash_password(password),
        active=True,
        created_at=utcnow(),
    )
    session.add(user)
    session.flush()
    for team in teams:
        team_row = get_or_create_team(session, team)
        session.execute(user_team.insert().values(user_id=user.id, team_id=team_row.id))
    session.flush()
    return user, password


def get_user(session: Session, name: str) -> User:
    """The user named ``name``.

    Raises:
        NotFound: no such user.
    """
    user = session.scalars(select(User).where(User.name == name)).one_or_none()
    if user is None:
        raise NotFound(f"no user named {name!r}")
    return user


def find_user(session: Session, name: str) -> User | None:
    """The user named ``name``, or ``None``."""
    return session.scalars(select(User).where(User.name == name)).one_or_none()


def user_teams(session: Session, user_id: int) -> frozenset[str]:
    """Names of the teams ``user_id`` belongs to."""
    return frozenset(
        session.scalars(
            select(Team.name)
            .join(user_team, user_team.c.team_id == Team.id)
            .where(user_team.c.user_id == user_id)
        )
    )


def set_password(session: Session, *, name: str, password: str) -> None:
    """Replace the password of ``name``.

    Raises:
        NotFound: no such user. BadRequest: password too short.
    """
    user = get_user(session, name)
    user.password_hash = hash_password(check_password(password))
    session.flush()


def list_users(session: Session) -> list[tuple[User, frozenset[str]]]:
    """Every user with its teams, by name."""
    users = list(session.scalars(select(User).order_by(User.name)))
    return [(u, user_teams(session, u.id)) for u in users]


def set_active(session: Session, *, name: str, active: bool) -> User:
    """Enable or disable ``name`` (a disabled user cannot log in; the caller ends its
    sessions).

    Raises:
        NotFound: no such user.
    """
    user = get_user(session, name)
    user.active = active
    session.flush()
    return user


def sync_sso_user(session: Session, *, name: str, role: Role, teams: Sequence[str]) -> User:
    """The single-sign-on user ``name`` with ``role`` and exactly ``teams`` (from the
    identity provider's groups at this login), created when new.

    Raises:
        BadRequest: invalid name. Conflict: a local user with a password has this name (an
            SSO login never takes over a local account).
    """
    check_name("user", name)
    user = find_user(session, name)
    if user is None:
        user = User(name=name, role=role.name, password_hash=None, active=True, created_at=utcnow())
        session.add(user)
        session.flush()
    elif user.password_hash is not None:
        raise Conflict(f"a local user named {name!r} exists; single sign-on cannot log in as it")
    user.role = role.name
    session.execute(user_team.delete().where(user_team.c.user_id == user.id))
    for team in sorted(set(teams)):
        team_row = get_or_create_team(session, team)
        session.execute(user_team.insert().values(user_id=user.id, team_id=team_row.id))
    session.flush()
    return user

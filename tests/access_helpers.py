"""Identities for the access tests: users logged in over HTTP (real session cookies), API
tokens and a node's agent token, on a server started with the production defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
from sqlalchemy import select

from app.access import tokens, users
from app.access.roles import Role
from app.access.sessions import COOKIE_NAME
from app.alerts.models import AlertInstance, AlertRule
from app.auth import service as agent_tokens
from app.db import session_scope, utcnow
from tests.dbs import session_factory

PASSWORD = "correct horse battery staple"


@dataclass(frozen=True)
class Caller:
    """How a request is sent: ``headers`` (bearer) and ``cookies`` (session); ``role`` and
    ``teams`` (``None``: every team) are what the policy should see."""

    label: str
    role: Role | None
    teams: frozenset[str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)
    agent: bool = False


def add_user(url: str, name: str, role: Role, teams: tuple[str, ...] = ()) -> None:
    """Create user ``name`` with :data:`PASSWORD` in the database at ``url``."""
    with session_factory(url) as factory:
        session = factory()
        try:
            users.create_user(session, name=name, role=role, teams=teams, password=PASSWORD)
            session.commit()
        finally:
            session.close()


def add_token(url: str, name: str, role: Role, team: str | None, ttl_s: float | None = None) -> str:
    """Create an API token; returns the secret."""
    with session_factory(url) as factory:
        session = factory()
        try:
            if team is not None:
                users.get_or_create_team(session, team)
            _, secret = tokens.create_token(
                session, name=name, role=role, team=team, created_by="tests", ttl_s=ttl_s
            )
            session.commit()
        finally:
            session.close()
    return secret


def add_agent_token(url: str, hostname: str) -> str:
    """Create a node's agent token (the node too)."""
    with session_factory(url) as factory:
        session = factory()
        try:
            _, secret = agent_tokens.create_token(session, hostname=hostname)
            session.commit()
        finally:
            session.close()
    return secret


def log_in(base: str, name: str, password: str = PASSWORD) -> str:
    """Log ``name`` in through ``POST /login``; returns the session cookie's value."""
    answer = httpx.post(f"{base}/login", data={"username": name, "password": password, "next": "/"})
    assert answer.status_code == 303, answer.text
    cookie = answer.cookies.get(COOKIE_NAME)
    assert cookie, answer.headers
    return cookie


def firing_instance(url: str, rule_name: str) -> str:
    """The id of a firing instance of ``rule_name`` (stored directly when there is none: the
    evaluator is not what this test is about)."""
    with session_factory(url) as factory, session_scope(factory) as session:
        rule = session.scalars(select(AlertRule).where(AlertRule.name == rule_name)).one()
        found = session.scalars(
            select(AlertInstance.id).where(AlertInstance.rule_id == rule.id)
        ).first()
        if found is not None:
            return str(found)
        now = utcnow()
        row = AlertInstance(
            rule_id=rule.id,
            fingerprint="rr",
            labels={"alertname": rule_name},
            state="firing",
            active_since=now,
            fired_at=now,
            last_evaluated_at=now,
        )
        session.add(row)
        session.flush()
        return str(row.id)

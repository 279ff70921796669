"""The identity the feature tests act as: a real admin API token, sent by a harness wrapper.

The access policy (``app/access``) refuses anonymous calls by default. Feature tests written
before it (thousands of calls to pages and APIs) exercise features, not access, so the
servers they start are wrapped in :class:`AsTestAdmin`: an ASGI layer in front of the
unchanged application that adds ``Authorization: Bearer <token>`` to requests carrying no
credentials of their own. The token is an ordinary admin API token created in the test's
database, so every such request still goes through the production path (token digest lookup,
expiry and revocation, policy table, role check, audit). Requests that carry their own
``Authorization`` header or session cookie, and routes whose decision is public or agent
token (the ingest keeps checking node tokens), are passed unchanged. The access tests
(``tests/app/test_access_*.py``) start servers without the wrapper.
"""

from __future__ import annotations

import threading
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from app.access import policy, tokens
from app.access.middleware import match
from app.access.roles import Role
from app.access.sessions import COOKIE_NAME
from app.db import session_scope

TEST_ADMIN_TOKEN_NAME = "test-admin"


def create_admin_token(session_factory: Any) -> str:
    """A new every-team admin API token in the database of ``session_factory``."""
    with session_scope(session_factory) as session:
        _, secret = tokens.create_token(
            session,
            name=TEST_ADMIN_TOKEN_NAME,
            role=Role.admin,
            team=None,
            created_by="tests",
            ttl_s=None,
        )
    return secret


class AsTestAdmin:
    """ASGI wrapper around a Fleetwatch app (see the module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app: ASGIApp = app
        self.fastapi = app
        self._token: str | None = None
        self._lock = threading.Lock()

    def _ensure_token(self) -> str:
        with self._lock:
            if self._token is None:
                self._token = create_admin_token(self.fastapi.state.session_factory)
            return self._token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._wants_admin(scope):
            token = await run_in_threadpool(self._ensure_token)
            scope = dict(scope)
            scope["headers"] = [*scope["headers"], (b"authorization", f"Bearer {token}".encode())]
        await self.app(scope, receive, send)

    def _wants_admin(self, scope: Scope) -> bool:
        for key, value in scope["headers"]:
            if key == b"authorization":
                return False
            if key == b"cookie" and f"{COOKIE_NAME}=".encode() in value:
                return False
        if scope["path"].startswith(policy.PUBLIC_MOUNTS):
            return False
        matched = match(self.fastapi, scope["method"], scope["path"])
        return matched is not None and isinstance(matched.decision, policy.Need)

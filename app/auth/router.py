"""``POST /api/v1/enroll`` (a new node's agent, with an enrollment token) and the admins'
``/api/v1/enrollment-tokens``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Header, Request
from pydantic import BaseModel, Field

from app.access.identity import bearer
from app.access.middleware import client_address, identity_of
from app.api_params import IdPath
from app.audit import service as audit
from app.auth import enrollment
from app.auth.models import EnrollmentToken
from app.db import SessionDep, WriteSessionDep
from app.errors import Unauthenticated

router = APIRouter(prefix="/api/v1", tags=["agents"])


class EnrollIn(BaseModel):
    """The node asking for its token."""

    hostname: str = Field(min_length=1, max_length=253)


class EnrollOut(BaseModel):
    """The node's own agent token (shown once)."""

    hostname: str
    token: str


@router.post("/enroll", status_code=201)
def enroll(
    request: Request,
    session: WriteSessionDep,
    body: EnrollIn,
    authorization: Annotated[str | None, Header()] = None,
) -> EnrollOut:
    """Exchange an enrollment token (``Authorization: Bearer fwe_…``) for the node's own
    agent token: 401 unknown/expired/used-up token, 409 the node already has a token."""
    token = bearer(authorization)
    if token is None:
        raise Unauthenticated("missing Authorization header (expected 'Bearer <enrollment token>')")
    row, node_token = enrollment.enroll(session, token=token, hostname=body.hostname)
    audit.record(
        session,
        actor=f"enrollment:{row.name}",
        action="node.enroll",
        address=client_address(request.scope),
        target={"hostname": body.hostname},
        status=201,
        detail={"uses": row.uses, "max_uses": row.max_uses},
    )
    return EnrollOut(hostname=body.hostname, token=node_token)


class EnrollmentTokenIn(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    max_uses: int = Field(default=1, ge=1, le=enrollment.MAX_USES)
    ttl_s: float = Field(default=86400.0, gt=0, le=enrollment.MAX_TTL_S)


class EnrollmentTokenOut(BaseModel):
    id: int
    name: str
    prefix: str
    created_by: str
    created_at: datetime
    expires_at: datetime
    max_uses: int
    uses: int
    revoked_at: datetime | None


class EnrollmentTokenCreated(EnrollmentTokenOut):
    #: Shown once; only its SHA-256 digest is stored.
    token: str


def _out(row: EnrollmentToken) -> EnrollmentTokenOut:
    return EnrollmentTokenOut.model_validate(row, from_attributes=True)


@router.get("/enrollment-tokens")
def list_enrollment_tokens(session: SessionDep) -> list[EnrollmentTokenOut]:
    """Every enrollment token (never the secret), newest first."""
    return [_out(row) for row in enrollment.list_all(session)]


@router.post("/enrollment-tokens", status_code=201)
def create_enrollment_token(
    request: Request, session: WriteSessionDep, body: EnrollmentTokenIn
) -> EnrollmentTokenCreated:
    """A token that lets ``max_uses`` new nodes get their own token within ``ttl_s``."""
    row, secret = enrollment.create(
        session,
        name=body.name,
        max_uses=body.max_uses,
        ttl_s=body.ttl_s,
        created_by=identity_of(request).actor,
    )
    return EnrollmentTokenCreated(**_out(row).model_dump(), token=secret)


@router.post("/enrollment-tokens/{token_id}/revoke")
def revoke_enrollment_token(session: WriteSessionDep, token_id: IdPath) -> EnrollmentTokenOut:
    """Revoke an enrollment token at once (nodes it enrolled keep their tokens)."""
    return _out(enrollment.revoke(session, token_id=token_id))

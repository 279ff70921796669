"""Retiring a node: an operator takes a decommissioned (or replaced, or renamed) node out of the
fleet, and a node that reports again comes back.

A retired node's tokens are revoked, so its agent's pushes are refused (401) instead of keeping
it alive; it leaves the fleet's lists and counts, health and alert evaluation (its alerts
resolve at the next evaluation, as for any entity gone), and its history stays readable on its
page. Creating a new token for the hostname and sending a batch brings it back into service
(:func:`return_on_report`, called by the ingest).
"""

from __future__ import annotations

import logging
import unicodedata

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth import service as auth_service
from app.db import utcnow
from app.errors import Conflict
from app.fleet import service as fleet_service
from app.fleet.models import Node
from app.ingest.fields import plain_text

log = logging.getLogger(__name__)

#: Longest reason kept (it is shown on the node page and in the API).
MAX_REASON = 1024


def retire(session: Session, *, hostname: str, reason: str) -> tuple[Node, int]:
    """Retire ``hostname`` with ``reason`` (flushes); returns the node and the tokens revoked.

    Raises:
        NotFound: no node has that hostname.
        Conflict: it is retired already (since when, and why).
        ValueError: ``reason`` is empty, longer than :data:`MAX_REASON` or holds a control
            character (the message starts ``reason:``).
    """
    try:
        reason = checked_reason(reason)
    except ValueError as exc:
        raise ValueError(f"reason: {exc}") from None
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    if node.retired_at is not None:
        raise Conflict(
            f"{hostname} is retired already, since {node.retired_at.isoformat()}: "
            f"{node.retired_reason}"
        )
    revoked = auth_service.revoke_tokens(session, hostname=hostname)
    node.retired_at = utcnow()
    node.retired_reason = reason
    session.flush()
    log.info("node %s retired (%s); %d token(s) revoked", hostname, reason, revoked)
    return node, revoked


def return_to_service(session: Session, *, hostname: str) -> Node:
    """Bring ``hostname`` back into the fleet (flushes); its agent needs a new token
    (``fleetwatch token create``) if it was retired with its tokens revoked.

    Raises:
        NotFound: no node has that hostname.
        Conflict: it is not retired.
    """
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    if node.retired_at is None:
        raise Conflict(f"{hostname} is not retired")
    log.info("node %s back in service", hostname)
    node.retired_at = None
    node.retired_reason = None
    session.flush()
    return node


def return_on_report(node: Node) -> None:
    """A batch from ``node`` was accepted: a retired node reporting again (with a token created
    after it was retired) is back in service."""
    if node.retired_at is not None:
        log.info("node %s reported again: back in service", node.hostname)
        node.retired_at = None
        node.retired_reason = None


def retired_hostnames(session: Session) -> frozenset[str]:
    """The hostnames of every retired node."""
    return frozenset(session.scalars(select(Node.hostname).where(Node.retired_at.is_not(None))))


def checked_reason(reason: str) -> str:
    """``reason`` stripped, when it says something: 1 to :data:`MAX_REASON` characters, at
    least one that shows (not only spaces or invisible formatting such as zero-width spaces),
    no control character.

    Raises:
        ValueError: naming what is wrong.
    """
    reason = reason.strip()
    visible = any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in reason)
    if not visible or len(reason) > MAX_REASON:
        raise ValueError(f"say why, in 1 to {MAX_REASON} characters")
    return plain_text(reason)

"""First start with an enrollment token: ask the server for this node's own agent token
(``POST /api/v1/enroll``) and keep it in the token file (mode 0600) for every later start.

Standard library only, like the rest of the agent's push path.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

ENROLL_ENV = "FLEETWATCH_AGENT_ENROLL_TOKEN"
TIMEOUT_S = 30.0


class EnrollFailed(Exception):
    """The server did not give a token; the message says why (its ``detail`` when it answered)."""


def enroll(server_url: str, enroll_token: str, hostname: str) -> str:
    """This node's agent token, from ``server_url`` in exchange for ``enroll_token``.

    Raises:
        EnrollFailed: no answer, or a refusal (401 unknown/expired/used-up token, 409 the node
            already has a token) with the server's reason.
    """
    request = urllib.request.Request(
        server_url.rstrip("/") + "/api/v1/enroll",
        data=json.dumps({"hostname": hostname}).encode(),
        headers={"Authorization": f"Bearer {enroll_token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            body = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail", "")
        except (ValueError, AttributeError):
            detail = ""
        raise EnrollFailed(
            f"the server refused the enrollment (HTTP {exc.code}): {detail}"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise EnrollFailed(f"could not reach {server_url} to enroll: {exc}") from None
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        raise EnrollFailed("the server's enrollment answer holds no token")
    return token


def save_token(path: Path, token: str) -> None:
    """Write ``token`` to ``path`` readable by the owner only (parent folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")

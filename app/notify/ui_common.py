"""What the notification pages share: the write session (committed before the response is
sent), the secret box, the SSRF allow-list, the form reader and the redirect after a POST."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.responses import RedirectResponse

from app.forms import Form, read_form
from app.notify.secrets import SecretBox
from app.viewer_time import tz_query

FormDep = Annotated[Form, Depends(read_form)]


def box_of(request: Request) -> SecretBox:
    """The app's :class:`SecretBox` (made once from the settings' secret key)."""
    box = getattr(request.app.state, "secret_box", None)
    if box is None:
        box = request.app.state.secret_box = SecretBox.from_settings(request.app.state.settings)
    return box


def allow_hosts(request: Request) -> list[str]:
    """The ``notify_allow_hosts`` setting (hosts/CIDRs the SSRF guard lets through)."""
    return list(request.app.state.settings.notify_allow_hosts)


def with_tz(request: Request, path: str) -> str:
    """``path`` with the viewer's ``tz`` query added (when not UTC)."""
    tzq = tz_query(request)
    if not tzq:
        return path
    return f"{path}{'&' if '?' in path else '?'}{tzq}"


def see_other(request: Request, path: str) -> RedirectResponse:
    """Redirect-after-POST (303) to ``path``, keeping the viewer's zone."""
    return RedirectResponse(with_tz(request, path), status_code=303)

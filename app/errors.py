"""Domain errors raised by services, mapped to HTTP once in :mod:`app.main`."""

from __future__ import annotations


class FleetwatchError(Exception):
    """Base of the errors a service raises on purpose; ``status_code`` is the HTTP mapping."""

    status_code = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotFound(FleetwatchError):
    """The named thing (node, GPU …) does not exist."""

    status_code = 404


class Unauthenticated(FleetwatchError):
    """No credentials, or credentials that match nothing."""

    status_code = 401


class Forbidden(FleetwatchError):
    """Valid credentials that do not allow this action."""

    status_code = 403


class Conflict(FleetwatchError):
    """The request contradicts what is stored (a batch id reused for different content)."""

    status_code = 409


class BadRequest(FleetwatchError):
    """A request the server cannot read (bad gzip, not JSON, bad query parameter)."""

    status_code = 400


class Unprocessable(FleetwatchError):
    """A value of the wrong shape for what it names (a Slurm job id that is not one); the
    message names the parameter."""

    status_code = 422


class Unavailable(FleetwatchError):
    """An outside system the answer depends on could not be asked (Slurm's controller down),
    and nothing stored answers instead."""

    status_code = 503


class ClientGone(FleetwatchError):
    """The client closed the connection before its request body was read (an agent that gave
    up on a slow server): nothing was stored; the answer, 499 as nginx logs it, reaches no one."""

    status_code = 499


class PayloadTooLarge(FleetwatchError):
    """A body over the configured size limit."""

    status_code = 413


class UnsupportedMediaType(FleetwatchError):
    """A content type or encoding the endpoint does not accept."""

    status_code = 415

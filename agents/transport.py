"""``urllib.request`` plumbing for the pusher: a connect timeout and a total deadline.

``urlopen``'s single ``timeout`` bounds each socket operation, not the exchange: a server that
trickles its answer could hold the agent forever. Here the connect (and TLS handshake) gets
``connect_timeout_s``, and a :class:`Deadline` bounds the whole exchange by shutting the socket
down when it expires. Redirects are not followed: a POST must not silently become a GET.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
import urllib.request
from typing import Any


class Deadline:
    """The total time budget of one exchange; once armed with the connected socket, it shuts
    the socket down when the budget runs out, which wakes a read blocked on a trickling server."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.fired = False
        self._timer: threading.Timer | None = None

    def remaining(self) -> float:
        """Seconds left, never below a millisecond (a zero timeout would mean non-blocking)."""
        return max(0.001, self.at - time.monotonic())

    @property
    def expired(self) -> bool:
        """Whether the budget is spent."""
        return time.monotonic() >= self.at

    def arm(self, sock: socket.socket) -> None:
        """Give ``sock`` the remaining budget and shut it down when the budget is spent."""
        self.disarm()
        sock.settimeout(self.remaining())
        self._timer = threading.Timer(self.remaining(), self._fire, args=(sock,))
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        """Stop the watchdog (the exchange is over)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self, sock: socket.socket) -> None:
        # A shut-down socket reads as EOF, which http.client may take for the end of a valid
        # (truncated) answer; ``fired`` lets the caller know the answer cannot be trusted.
        self.fired = True
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def build_opener(connect_timeout_s: float, deadline: Deadline) -> urllib.request.OpenerDirector:
    """Return an opener for one exchange: proxies from the environment, HTTP and HTTPS under
    ``connect_timeout_s`` and ``deadline``, non-2xx answers raised as ``HTTPError``, no
    redirect handling."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        _HTTPHandler(connect_timeout_s, deadline),
        _HTTPSHandler(connect_timeout_s, deadline),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


class _DeadlineConnect:
    """Connects within the connect timeout, then runs under the exchange's total deadline; mixed
    into the plain and the TLS connection (for TLS the handshake counts towards the connect
    timeout)."""

    timeout: float | None
    sock: Any

    def __init__(
        self, *args: Any, connect_timeout_s: float, deadline: Deadline, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._connect_timeout_s, self._deadline = connect_timeout_s, deadline

    def connect(self) -> None:
        self.timeout = min(self._connect_timeout_s, self._deadline.remaining())
        super().connect()  # type: ignore[misc]
        if self.sock is not None:
            self._deadline.arm(self.sock)


class _HTTPConnection(_DeadlineConnect, http.client.HTTPConnection):
    """A plain HTTP connection under :class:`_DeadlineConnect`."""


class _HTTPSConnection(_DeadlineConnect, http.client.HTTPSConnection):
    """A TLS connection under :class:`_DeadlineConnect`."""


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, connect_timeout_s: float, deadline: Deadline) -> None:
        super().__init__()
        self._connect_timeout_s, self._deadline = connect_timeout_s, deadline

    def _connection(self, host: str, /, **kwargs: Any) -> http.client.HTTPConnection:
        return _HTTPConnection(
            host, connect_timeout_s=self._connect_timeout_s, deadline=self._deadline, **kwargs
        )

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    """HTTPS with the default certificate verification of ``http.client.HTTPSConnection``."""

    def __init__(self, connect_timeout_s: float, deadline: Deadline) -> None:
        super().__init__()
        self._connect_timeout_s, self._deadline = connect_timeout_s, deadline

    def _connection(self, host: str, /, **kwargs: Any) -> http.client.HTTPConnection:
        return _HTTPSConnection(
            host, connect_timeout_s=self._connect_timeout_s, deadline=self._deadline, **kwargs
        )

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)

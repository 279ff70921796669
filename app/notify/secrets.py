"""Webhook URLs and signing secrets are secrets: encrypted at rest, masked in the API, redacted
from logs and error texts.

The key comes from the ``secret_key`` setting (``FLEETWATCH_SECRET_KEY``); without it a random
key is created once in ``<data_dir>/secret.key`` (mode 0600) so the SQLite try-out works with
no setup. Fernet (AES-128-CBC + HMAC-SHA256, ``cryptography``) encrypts; its key is derived from
the secret key with a purpose label, so the same secret key can also sign ack links
(:mod:`app.notify.ack_links`) without the two uses sharing key material.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import secrets
import threading
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken

from app.config import Settings

KEY_FILE = "secret.key"
MASK = "…"


class SecretUnreadable(Exception):
    """A stored secret cannot be decrypted (the secret key changed or the value is damaged)."""


def secret_key(settings: Settings) -> str:
    """The server's secret key: the setting, else the key file in ``data_dir`` (created with
    mode 0600 on first use; concurrent creators keep whichever was written first)."""
    if settings.secret_key is not None:
        return settings.secret_key.get_secret_value()
    path = Path(settings.data_dir) / KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def _fernet(key: str) -> Fernet:
    derived = hashlib.sha256(b"fleetwatch notify secrets\0" + key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(derived))


class SecretBox:
    """Encrypts and decrypts channel secrets with the server's key."""

    def __init__(self, key: str) -> None:
        self._fernet = _fernet(key)

    @classmethod
    def from_settings(cls, settings: Settings) -> SecretBox:
        """A box with :func:`secret_key` of ``settings``."""
        return cls(secret_key(settings))

    def encrypt(self, value: str) -> str:
        """A Fernet token (URL-safe base64 text) for ``value``; remembered for redaction."""
        remember(value)
        return self._fernet.encrypt(value.encode()).decode()

    def decrypt(self, token: str) -> str:
        """The plain value of a token from :meth:`encrypt`; remembered for redaction.

        Raises:
            SecretUnreadable: wrong key or damaged token.
        """
        try:
            value = self._fernet.decrypt(token.encode()).decode()
        except (InvalidToken, ValueError):
            raise SecretUnreadable(
                "the stored webhook URL cannot be decrypted with this server's secret key "
                "(FLEETWATCH_SECRET_KEY changed?); enter the URL again"
            ) from None
        remember(value)
        return value


def mask_url(url: str) -> str:
    """``scheme://host[:port]/…``: what the API and pages show of a webhook URL (the path and
    query, fragment and any ``user:password@`` are never shown); a URL that does not parse
    shows as ``(invalid URL)``."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(invalid URL)"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}/{MASK}"


_known: set[str] = set()
_known_lock = threading.Lock()


def _variants(value: str) -> set[str]:
    """A secret and, for a URL, its path + query (+ fragment) and the query or fragment alone
    (what error texts and logs may quote, e.g. with the host replaced by its address)."""
    found = {value}
    try:
        parts = urlsplit(value)
    except ValueError:
        return found
    if not parts.scheme:
        return found
    query = f"?{parts.query}" if parts.query else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    if len(parts.path) >= 6:  # shorter paths are not secrets, just noise
        found.add(parts.path + query)
    tail = parts.path + query + fragment
    found.update(t for t in (tail, query + fragment, query, fragment) if len(t) >= 6)
    return found


def remember(value: str | None) -> None:
    """Add a secret (and a URL's path + query) to the set :func:`redact` removes from text."""
    if not value or len(value) < 4:
        return
    with _known_lock:
        _known.update(_variants(value))


def redact(text: str, *values: str | None) -> str:
    """``text`` with ``values`` and every remembered secret replaced: a URL by
    :func:`mask_url`, anything else by ``…``. Longest first, so a URL is replaced whole before
    its path alone."""
    with _known_lock:
        candidates = set(_known)
    for v in values:
        if v:
            candidates |= _variants(v)
    for value in sorted(candidates, key=len, reverse=True):
        if value in text:
            is_url = urlsplit(value).scheme in ("http", "https")
            text = text.replace(value, mask_url(value) if is_url else MASK)
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that rewrites a record's message through :func:`redact` (installed on
    the ``httpx``/``httpcore`` loggers, which log request URLs, and the notifier's own)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


_FILTER = RedactingFilter()
_LOGGERS = (
    "httpx",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "app.notify.worker",
    "app.notify.outbox",
    "app.notify.service",
    "app.notify.jobs",
)


def install_log_redaction() -> None:
    """Attach :class:`RedactingFilter` to the loggers that may see webhook URLs (idempotent).
    Logger filters apply to records created on that logger, hence each name is listed."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)

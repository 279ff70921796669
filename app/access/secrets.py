"""Random secrets and their digests (session ids, API tokens) and password hashing.

Session ids and API tokens are 256-bit random strings (``secrets.token_urlsafe(32)``): a single
SHA-256 digest stores them safely (they cannot be guessed from a dictionary) and keeps the
lookup one indexed read. Passwords are hashed with argon2id through pwdlib's recommended
settings (RFC 9106 parameters).
"""

from __future__ import annotations

import hashlib
import secrets

from pwdlib import PasswordHash

_hasher = PasswordHash.recommended()
# Verified against when the user name is unknown, so both answers take as long.
_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))


def new_secret(prefix: str) -> str:
    """``prefix`` + 43 URL-safe characters (256 random bits)."""
    return prefix + secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    """SHA-256 hex digest of ``secret`` (64 characters)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def hash_password(password: str) -> str:
    """The argon2id hash string of ``password`` (``$argon2id$v=19$…``)."""
    return _hasher.hash(password)


def verify_password(password: str, hashed: str | None) -> bool:
    """Whether ``password`` matches ``hashed``; a ``None`` hash (no local password) still spends
    one verification so the time does not tell whether the user exists."""
    if hashed is None:
        _hasher.verify(password, _DUMMY_HASH)
        return False
    try:
        return _hasher.verify(password, hashed)
    except Exception:  # a malformed stored hash: refuse, never crash the login page
        return False

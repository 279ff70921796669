"""A separate OpenID Connect provider process for the single-sign-on tests: PyPI's
``oidc-provider-mock`` (a real authlib-based provider: discovery, authorization form, token
endpoint, signed ID tokens, JWKS), started on a free port and stopped after."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tests.live_server import free_port


@contextmanager
def oidc_provider() -> Iterator[str]:
    """Start the provider; yields its issuer URL (``http://127.0.0.1:PORT``)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "oidc_provider_mock", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    issuer = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "oidc-provider-mock exited"
            try:
                if httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=2).is_success:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "oidc-provider-mock did not start"
            time.sleep(0.1)
        yield issuer
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def set_user(issuer: str, sub: str, claims: dict[str, Any]) -> None:
    """Give subject ``sub`` these claims at the provider (its ``PUT /users/<sub>``)."""
    answer = httpx.put(f"{issuer}/users/{sub}", json=claims, timeout=5)
    assert answer.is_success, answer.text

"""Single sign-on with OpenID Connect: authorization code flow with PKCE (RFC 7636), state
and nonce, through authlib's OAuth 2 client; the ID token's signature and claims (issuer,
audience, expiry, nonce) checked with joserfc against the provider's JWKS.

Sources: OpenID Connect Core 1.0 §3.1 (code flow) and §3.1.3.7 (ID token validation);
OpenID Connect Discovery 1.0 (``/.well-known/openid-configuration``); OpenID Connect
RP-Initiated Logout 1.0 (§2-3: ``end_session_endpoint``, ``client_id``,
``post_logout_redirect_uri``).

Groups in the ID token (``oidc_groups_claim``) map to a role and teams through
``oidc_group_roles`` (``group=role`` or ``group=role:team``): the highest role wins, teams add
up, and a user in no mapped group is refused. SSO users are stored without a password and
their role and teams are set again at every login.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
from authlib.integrations.requests_client import OAuth2Session
from itsdangerous import BadSignature, URLSafeTimedSerializer
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from app.access.roles import Role
from app.config import Settings

STATE_COOKIE = "fw_oidc"
STATE_MAX_AGE_S = 600
DISCOVERY_TTL_S = 300.0
HTTP_TIMEOUT_S = 10.0


class OidcError(Exception):
    """The single sign-on could not complete; the message says why (shown on the login page)."""


def parse_grant(text: str) -> tuple[Role, str | None]:
    """``role`` or ``role:team`` → (role, team).

    Raises:
        ValueError: an unknown role or an empty team.
    """
    role_text, sep, team = text.partition(":")
    role = Role.parse(role_text)
    if sep and not team.strip():
        raise ValueError(f"{text!r}: team after ':' is empty (expected role or role:team)")
    return role, team.strip() or None


def grants_of(groups: list[str], mapping: dict[str, str]) -> tuple[Role | None, set[str]]:
    """The role (highest of the mapped groups, ``None`` when none is mapped) and teams."""
    role: Role | None = None
    teams: set[str] = set()
    for group in groups:
        if group in mapping:
            granted, team = parse_grant(mapping[group])
            role = granted if role is None or granted > role else role
            if team:
                teams.add(team)
    return role, teams


@dataclass(frozen=True)
class OidcConfig:
    """What single sign-on needs from the settings."""

    issuer: str
    client_id: str
    client_secret: str | None
    username_claim: str
    groups_claim: str
    group_roles: dict[str, str]

    @classmethod
    def of(cls, settings: Settings) -> OidcConfig | None:
        """The configuration, ``None`` when ``oidc_issuer`` or ``oidc_client_id`` is unset."""
        if not settings.oidc_issuer or not settings.oidc_client_id:
            return None
        secret = settings.oidc_client_secret
        return cls(
            issuer=settings.oidc_issuer.rstrip("/"),
            client_id=settings.oidc_client_id,
            client_secret=secret.get_secret_value() if secret is not None else None,
            username_claim=settings.oidc_username_claim,
            groups_claim=settings.oidc_groups_claim,
            group_roles=dict(settings.oidc_group_roles),
        )


_discovery: dict[str, tuple[float, dict[str, Any]]] = {}


def discover(issuer: str) -> dict[str, Any]:
    """The provider's metadata (cached ``DISCOVERY_TTL_S``).

    Raises:
        OidcError: unreachable, not JSON, or its ``issuer`` is not ``issuer``.
    """
    cached = _discovery.get(issuer)
    if cached is not None and time.monotonic() - cached[0] < DISCOVERY_TTL_S:
        return cached[1]
    try:
        answer = httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=HTTP_TIMEOUT_S)
        answer.raise_for_status()
        meta = answer.json()
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        raise OidcError(f"identity provider {issuer} did not answer its discovery: {exc}") from None
    named = meta.get("issuer") if isinstance(meta, dict) else None
    # Whatever the provider answers is checked here: a logout must not fail on it (its
    # session would stay open).
    if not isinstance(named, str) or named.rstrip("/") != issuer:
        raise OidcError(f"identity provider discovery names another issuer than {issuer}")
    _discovery[issuer] = (time.monotonic(), meta)
    return meta


def _serializer(key: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(key, salt="fleetwatch-oidc-state")


def start(config: OidcConfig, *, redirect_uri: str, next_path: str, key: str) -> tuple[str, str]:
    """Begin a login: the provider URL to send the browser to, and the signed state cookie
    (state, nonce, PKCE verifier, where to go after)."""
    meta = discover(config.issuer)
    state, nonce, verifier = (secrets.token_urlsafe(24) for _ in range(3))
    client = OAuth2Session(
        config.client_id,
        config.client_secret,
        scope="openid profile email",
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
    )
    url, _ = client.create_authorization_url(
        meta["authorization_endpoint"], state=state, nonce=nonce, code_verifier=verifier
    )
    cookie = _serializer(key).dumps(
        {"state": state, "nonce": nonce, "verifier": verifier, "next": next_path}
    )
    return url, cookie


@dataclass(frozen=True)
class SsoUser:
    """Who the provider says logged in, and what the group mapping grants."""

    name: str
    role: Role
    teams: frozenset[str]
    groups: tuple[str, ...]


def finish(
    config: OidcConfig, *, params: dict[str, str], cookie: str | None, redirect_uri: str, key: str
) -> tuple[SsoUser, str]:
    """Complete a login from the provider's redirect (``code``, ``state``): exchange the code,
    validate the ID token, map its groups. Returns the user and the ``next`` path.

    Raises:
        OidcError: an error from the provider, a missing/expired/foreign state, a failed
            exchange, an invalid ID token, or no mapped group.
    """
    if "error" in params:
        why = f"{params['error']} {params.get('error_description', '')}".strip()
        raise OidcError(f"the identity provider refused: {why}")
    if not cookie:
        raise OidcError("the single sign-on expired or was started in another browser; try again")
    try:
        saved = _serializer(key).loads(cookie, max_age=STATE_MAX_AGE_S)
    except BadSignature:
        raise OidcError("the single sign-on expired or was tampered with; try again") from None
    if not params.get("state") or not secrets.compare_digest(params["state"], saved["state"]):
        raise OidcError("the answer's state does not match this browser's login; try again")
    if not params.get("code"):
        raise OidcError("the identity provider sent no authorization code")
    meta = discover(config.issuer)
    client = OAuth2Session(
        config.client_id,
        config.client_secret,
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
    )
    try:
        token = client.fetch_token(
            meta["token_endpoint"],
            code=params["code"],
            code_verifier=saved["verifier"],
            timeout=HTTP_TIMEOUT_S,
        )
        jwks = httpx.get(meta["jwks_uri"], timeout=HTTP_TIMEOUT_S).json()
    except Exception as exc:  # requests, OAuth errors, JSON: all one answer to the user
        raise OidcError(f"the code exchange with the identity provider failed: {exc}") from None
    claims = validate_id_token(str(token.get("id_token", "")), jwks, config, nonce=saved["nonce"])
    name = claims.get(config.username_claim) or claims.get("email") or claims.get("sub")
    groups_value = claims.get(config.groups_claim) or []
    groups = (
        [str(g) for g in groups_value] if isinstance(groups_value, list) else [str(groups_value)]
    )
    role, teams = grants_of(groups, config.group_roles)
    if role is None:
        raise OidcError(
            f"{name} is in no group that FLEETWATCH_OIDC_GROUP_ROLES maps to a role "
            f"(groups: {', '.join(groups) or 'none'})"
        )
    return SsoUser(str(name), role, frozenset(teams), tuple(groups)), str(saved.get("next", "/"))


def logout_url(config: OidcConfig, *, post_logout_redirect_uri: str) -> str | None:
    """Where to send the browser so that the provider ends its session too, then sends it back
    to ``post_logout_redirect_uri`` (which the provider must have registered for this client);
    ``None`` when the provider's discovery names no usable ``end_session_endpoint`` (an
    ``http(s)`` URL with a host and no whitespace or control character: it goes into a page).
    The endpoint's own query is kept (its ``client_id`` and ``post_logout_redirect_uri``
    replaced) and a fragment dropped (RP-Initiated Logout 1.0 §2: a query is allowed, the
    parameters go into it). The ID token is not kept, so the request identifies the client by
    ``client_id`` (§2 allows it in place of ``id_token_hint``; the provider may then ask the
    user to confirm).

    Raises:
        OidcError: the provider's discovery failed.
    """
    endpoint = discover(config.issuer).get("end_session_endpoint")
    if not isinstance(endpoint, str) or any(c.isspace() or not c.isprintable() for c in endpoint):
        return None
    try:
        parts = urlsplit(endpoint)
        host, _ = parts.hostname, parts.port
    except ValueError:
        return None
    if parts.scheme not in ("https", "http") or not host:
        return None
    ours = {"client_id": config.client_id, "post_logout_redirect_uri": post_logout_redirect_uri}
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in ours]
    query = urlencode([*kept, *ours.items()])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


def validate_id_token(
    id_token: str, jwks: dict[str, Any], config: OidcConfig, *, nonce: str
) -> dict[str, Any]:
    """The claims of ``id_token`` after checking its signature against ``jwks`` and its
    ``iss``, ``aud``, ``exp``, ``sub`` and ``nonce`` (OpenID Connect Core §3.1.3.7).

    Raises:
        OidcError: any check failed (the message names it).
    """
    try:
        decoded = jwt.decode(id_token, KeySet.import_key_set(jwks))  # type: ignore[arg-type]
        registry = jwt.JWTClaimsRegistry(
            iss={"essential": True, "value": config.issuer},
            aud={"essential": True, "value": config.client_id},
            sub={"essential": True},
            exp={"essential": True},
            nonce={"essential": True, "value": nonce},
        )
        registry.validate(decoded.claims)
    except (JoseError, ValueError) as exc:
        raise OidcError(f"the ID token is not valid: {exc}") from None
    return dict(decoded.claims)

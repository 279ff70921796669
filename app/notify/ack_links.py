"""Signed, expiring one-click acknowledgement links carried by firing notices.

A link is ``<external_url>/notify/ack/<token>``; the token is an itsdangerous
``URLSafeTimedSerializer`` signature (HMAC-SHA1 over the payload and a timestamp, keyed by the
server's secret key with the salt ``fleetwatch-ack``) of the alert's id and fingerprint, so it
acknowledges that alert only, and only until ``notify_ack_link_ttl_s`` has passed. Opening it
(GET) shows a confirmation page, since chat services fetch links to preview them; only the
page's button (POST) acknowledges.

Fleetwatch has no UI login yet: whoever holds a link can acknowledge its alert until it
expires (the link is the credential, as in PagerDuty's and Opsgenie's e-mail links). When
authentication arrives, the POST must also require a logged-in user.
"""

from __future__ import annotations

from dataclasses import dataclass

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

SALT = "fleetwatch-ack"


class AckLinkInvalid(Exception):
    """The token is damaged, signed with another key, or expired; the message says which."""


@dataclass(frozen=True)
class AckClaim:
    """What a valid token names: the alert (instance id) and its fingerprint."""

    alert_id: int
    fingerprint: str


class AckSigner:
    """Makes and reads ack tokens with one secret key and lifetime (seconds)."""

    def __init__(self, key: str, *, ttl_s: float) -> None:
        self._serializer = URLSafeTimedSerializer(key, salt=SALT)
        self.ttl_s = ttl_s

    def token(self, *, alert_id: int, fingerprint: str) -> str:
        """A URL-safe token for the alert, valid for ``ttl_s`` from now."""
        return str(self._serializer.dumps({"a": alert_id, "f": fingerprint}))

    def url(self, external_url: str, *, alert_id: int, fingerprint: str) -> str:
        """The absolute one-click link for the alert."""
        token = self.token(alert_id=alert_id, fingerprint=fingerprint)
        return f"{external_url.rstrip('/')}/notify/ack/{token}"

    def read(self, token: str) -> AckClaim:
        """The alert a token names.

        Raises:
            AckLinkInvalid: expired, tampered with, or not a token.
        """
        try:
            data = self._serializer.loads(token, max_age=int(self.ttl_s))
        except SignatureExpired:
            raise AckLinkInvalid("this acknowledgement link has expired") from None
        except BadSignature:
            raise AckLinkInvalid("this acknowledgement link is not valid") from None
        if not isinstance(data, dict) or not isinstance(data.get("a"), int):
            raise AckLinkInvalid("this acknowledgement link is not valid")
        return AckClaim(alert_id=data["a"], fingerprint=str(data.get("f", "")))

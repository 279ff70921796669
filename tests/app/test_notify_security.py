"""Pure parts of notifications: the SSRF guard, secret encryption, masking and redaction,
signed ack links, backoff and idempotency keys (no database, no network beyond resolving
literal addresses and ``localhost``)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from app.config import load_settings
from app.notify.ack_links import AckLinkInvalid, AckSigner
from app.notify.secrets import SecretBox, SecretUnreadable, mask_url, redact, secret_key
from app.notify.sender import idempotency_key
from app.notify.ssrf import BlockedDestination, check_url, refusal
from app.notify.worker import backoff_s


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1/x", "loopback"),
        ("http://localhost:8080/x", "loopback"),
        ("http://[::1]/x", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("http://169.254.10.1/x", "link-local"),
        ("http://[fe80::1]/x", "link-local"),
        ("http://[fd00:ec2::254]/x", "cloud metadata"),
        ("http://0.0.0.0/x", "unspecified"),
        ("http://224.0.0.1/x", "multicast"),
        ("http://[::ffff:127.0.0.1]/x", "loopback"),
    ],
)
def test_the_guard_refuses_local_and_metadata_addresses(url: str, why: str) -> None:
    with pytest.raises(BlockedDestination, match=f"a {why} address"):
        check_url(url)


def test_the_guard_refuses_the_metadata_host_name_before_resolving_it() -> None:
    with pytest.raises(BlockedDestination, match=r"metadata\.google\.internal is a cloud metadata"):
        check_url("http://metadata.google.internal/computeMetadata/v1/")


def test_the_guard_refuses_other_schemes() -> None:
    with pytest.raises(BlockedDestination, match="only http and https"):
        check_url("file:///etc/passwd")


def test_an_allow_list_entry_by_host_or_cidr_permits_a_refused_address() -> None:
    by_cidr = check_url("http://127.0.0.1:9000/hook?x=1", allow=["127.0.0.0/8"])
    assert (by_cidr.address, by_cidr.pinned_url, by_cidr.host_header) == (
        "127.0.0.1",
        "http://127.0.0.1:9000/hook?x=1",
        "127.0.0.1:9000",
    )
    by_host = check_url("https://localhost/hook", allow=["localhost"])
    assert by_host.host == "localhost" and by_host.address in ("127.0.0.1", "::1")


def test_private_and_public_addresses_pass() -> None:
    assert refusal(__import__("ipaddress").ip_address("10.1.2.3")) is None
    target = check_url("https://93.184.215.14/services/T/B/C")
    assert target.pinned_url == "https://93.184.215.14/services/T/B/C"


def test_mask_url_keeps_scheme_and_host_only() -> None:
    assert mask_url("https://hooks.slack.com/services/T0/B0/secret") == "https://hooks.slack.com/…"
    assert mask_url("http://[fd00::1]:8080/a?token=x") == "http://[fd00::1]:8080/…"


def test_redact_replaces_urls_and_their_paths_and_secrets() -> None:
    url = "https://chat.example.com/hooks/abc123SECRET"
    text = f"failed POST {url} and again /hooks/abc123SECRET with key k3y-SECRET"
    assert redact(text, url, "k3y-SECRET") == (
        "failed POST https://chat.example.com/… and again … with key …"
    )


def test_secrets_round_trip_and_a_changed_key_is_a_clear_error(tmp_path: Path) -> None:
    box = SecretBox("key-one")
    token = box.encrypt("https://hooks.example.com/T/B/C")
    assert "hooks.example.com" not in token
    assert box.decrypt(token) == "https://hooks.example.com/T/B/C"
    with pytest.raises(SecretUnreadable, match=r"cannot be decrypted.*FLEETWATCH_SECRET_KEY"):
        SecretBox("key-two").decrypt(token)


def test_without_a_secret_key_setting_a_0600_key_file_is_created_once(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    first = secret_key(settings)
    assert secret_key(settings) == first and len(first) >= 40
    mode = stat.S_IMODE(os.stat(tmp_path / "secret.key").st_mode)
    assert mode == 0o600
    assert secret_key(load_settings(data_dir=tmp_path, secret_key="from-settings")) == (
        "from-settings"
    )


def test_ack_links_name_their_alert_and_refuse_tampering_and_expiry() -> None:
    signer = AckSigner("k", ttl_s=60)
    url = signer.url("http://fw.example/", alert_id=42, fingerprint="abc")
    assert url.startswith("http://fw.example/notify/ack/")
    token = url.rsplit("/", 1)[1]
    claim = signer.read(token)
    assert (claim.alert_id, claim.fingerprint) == (42, "abc")
    with pytest.raises(AckLinkInvalid, match="not valid"):
        signer.read(token[:-2] + ("AA" if not token.endswith("AA") else "BB"))
    with pytest.raises(AckLinkInvalid, match="not valid"):
        AckSigner("other", ttl_s=60).read(token)
    expired = AckSigner("k", ttl_s=0)
    time.sleep(1.1)
    with pytest.raises(AckLinkInvalid, match="expired"):
        expired.read(token)


def test_backoff_is_full_jitter_capped() -> None:
    assert [backoff_s(n, base_s=1, cap_s=10, rng=lambda: 1.0) for n in (1, 2, 3, 4, 5, 6)] == [
        1,
        2,
        4,
        8,
        10,
        10,
    ]
    assert backoff_s(3, base_s=1, cap_s=10, rng=lambda: 0.25) == 1.0


def test_the_idempotency_key_depends_on_the_rows_not_their_order() -> None:
    assert idempotency_key([3, 1, 2]) == idempotency_key([1, 2, 3])
    assert idempotency_key([1, 2]) != idempotency_key([1, 2, 3])
    assert len(idempotency_key([1])) == len("fleetwatch-") + 32


def test_an_unresolvable_host_is_a_retryable_refusal() -> None:
    from app.notify.ssrf import Unresolvable

    with pytest.raises(Unresolvable, match=r"cannot resolve host no-such-host\.invalid"):
        check_url("https://no-such-host.invalid/hook")

"""The pusher sends gzip JSON with the right headers and classifies every outcome as the ingest
contract asks; backoff is exponential with full jitter and honours Retry-After."""

from __future__ import annotations

import contextlib
import gzip
import json
import random
import socket
import threading
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from agents.payload import build_node, build_payload, encode_payload, stamp_sent_at
from agents.push import Backoff, Outcome, Pusher, classify_status, parse_retry_after
from tests.agents.agent_receiver import Receiver, Reply


def _body() -> tuple[dict[str, object], bytes]:
    node = build_node(
        "gpu-a-017", {"cluster": "a"}, {"driver_version": "570", "cuda_version": None}
    )
    payload = stamp_sent_at(build_payload(node, [], [], []))
    return payload, encode_payload(payload)


def test_a_200_is_ok_and_the_request_is_gzip_json_with_a_bearer_token(receiver: Receiver) -> None:
    payload, body = _body()
    result = Pusher(receiver.url, "fwt_secret").push(body)
    assert result.outcome is Outcome.OK and result.status == 200
    (request,) = receiver.requests
    assert request.path == "/api/v1/ingest"
    assert request.headers["Authorization"] == "Bearer fwt_secret"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Content-Encoding"] == "gzip"
    assert json.loads(gzip.decompress(request.raw)) == payload


def test_a_trailing_slash_in_the_server_url_is_ignored(receiver: Receiver) -> None:
    Pusher(receiver.url + "/", "t").push(_body()[1])
    assert receiver.requests[0].path == "/api/v1/ingest"


@pytest.mark.parametrize("status", [500, 502, 503, 408, 429])
def test_server_errors_timeouts_and_throttling_are_retryable(
    receiver: Receiver, status: int
) -> None:
    receiver.script(Reply(status, body=b'{"detail": "busy"}'))
    result = Pusher(receiver.url, "t").push(_body()[1])
    assert result.outcome is Outcome.RETRY and result.status == status


@pytest.mark.parametrize("status", [401, 403, 404, 405, 407])
def test_refusals_no_batch_can_pass_until_a_setting_is_fixed_are_held(
    receiver: Receiver, status: int
) -> None:
    receiver.script(Reply(status, body=b'{"detail": "unknown or revoked node token"}'))
    result = Pusher(receiver.url, "t").push(_body()[1])
    assert result.outcome is Outcome.HOLD and result.status == status
    assert "unknown or revoked node token" in result.detail


def test_an_accepted_batch_keeps_the_whole_answer_beyond_the_log_excerpt(
    receiver: Receiver,
) -> None:
    rejections = [
        {"index": i, "gpu_uuid": "GPU-1", "reason": "sampled_at_in_future"} for i in range(100)
    ]
    answer = {"samples_rejected": 100, "rejections": rejections}
    receiver.script(Reply(200, body=json.dumps(answer).encode()))
    result = Pusher(receiver.url, "t").push(_body()[1])
    assert result.outcome is Outcome.OK and result.answer == answer
    assert len(result.detail) == 2048


@pytest.mark.parametrize("status", [400, 409, 413, 415, 422])
def test_other_client_errors_are_permanent_and_keep_the_body_for_the_log(
    receiver: Receiver, status: int
) -> None:
    receiver.script(Reply(status, body=b'{"detail": "no"}'))
    result = Pusher(receiver.url, "t").push(_body()[1])
    assert result.outcome is Outcome.PERMANENT and result.status == status
    assert '"no"' in result.detail


def test_retry_after_of_a_429_is_passed_on(receiver: Receiver) -> None:
    receiver.script(Reply(429, headers={"Retry-After": "7"}))
    result = Pusher(receiver.url, "t").push(_body()[1])
    assert result.retry_after_s == 7.0


def test_a_redirect_is_not_followed_but_retried_with_a_hint(receiver: Receiver) -> None:
    receiver.script(Reply(308, headers={"Location": "https://elsewhere/api/v1/ingest"}))
    result = Pusher(receiver.url, "t").push(_body()[1])
    assert result.outcome is Outcome.RETRY and "check --server" in result.detail
    assert len(receiver.requests) == 1


def test_connection_refused_is_retryable(refused_url: str) -> None:
    result = Pusher(refused_url, "t").push(_body()[1])
    assert result.outcome is Outcome.RETRY and result.status is None
    assert "network error" in result.detail


def test_a_server_slower_than_the_timeout_is_retryable(receiver: Receiver) -> None:
    receiver.script(Reply(200, delay_s=1.5))
    result = Pusher(receiver.url, "t", connect_timeout_s=0.5, timeout_s=0.3).push(_body()[1])
    assert result.outcome is Outcome.RETRY and result.status is None
    assert "timeout" in result.detail


def test_status_classes_follow_the_contract() -> None:
    assert classify_status(204) is Outcome.OK
    assert classify_status(599) is Outcome.RETRY
    assert classify_status(403) is Outcome.HOLD
    assert classify_status(422) is Outcome.PERMANENT


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    now = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    assert parse_retry_after("999999") == 3600.0


def test_backoff_is_full_jitter_doubling_to_the_cap_and_resets_after_success() -> None:
    backoff = Backoff(base_s=1.0, cap_s=8.0, rng=random.Random(1))
    ceilings = [1, 2, 4, 8, 8, 8]
    delays = [backoff.next_delay() for _ in ceilings]
    assert all(0 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert backoff.failures == 6
    backoff.reset()
    assert all(backoff.next_delay() <= 1.0 for _ in range(1)) and backoff.failures == 1


def test_backoff_never_waits_less_than_retry_after() -> None:
    backoff = Backoff(base_s=0.01, cap_s=0.02, rng=random.Random(2))
    assert backoff.next_delay(retry_after_s=5.0) == 5.0


def test_a_server_trickling_its_answer_is_cut_off_at_the_total_timeout() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            for _ in range(40):
                if stop.wait(0.1):
                    return
                with contextlib.suppress(OSError):
                    conn.sendall(b"a")
            with contextlib.suppress(OSError):
                conn.sendall(b"\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        result = Pusher(url, "t", connect_timeout_s=1.0, timeout_s=0.4).push(_body()[1])
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert result.outcome is Outcome.RETRY and "timeout" in result.detail

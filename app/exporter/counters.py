"""Fleetwatch's own counters and histograms (``fleetwatch_*``), updated where the events
happen: the ingest router (batches, rejections by reason, latency), the alert scheduler (rule
evaluation time), the notification worker (deliveries by outcome).

Several processes: ``fleetwatch serve --workers N`` runs N web processes and a worker child;
each counts its own events. With ``PROMETHEUS_MULTIPROC_DIR`` set (the serve command sets a
fresh directory for its children when the environment does not name one), prometheus-client's
multiprocess mode keeps each process's values in files there and every scrape sums them, so a
counter is the server's whatever process answers (:func:`source`); dead processes' counts stay
in the sum. Without it the values are the answering process's own (one process:
``fleetwatch serve``). See docs/metrics.md.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi.exceptions import RequestValidationError
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.multiprocess import MultiProcessCollector

# ``*_created`` samples (a counter's creation time) exist only in one process's registry,
# never in multiprocess mode: left out so that both modes serve the same series.
disable_created_metrics()

#: The registry of this process's counters (multiprocess mode reads the shared files instead).
REGISTRY = CollectorRegistry(auto_describe=True)

#: HTTP status of a refused batch → reason label.
REJECT_REASONS = {
    400: "bad_body",
    401: "unauthenticated",
    403: "forbidden",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    499: "client_gone",
}
#: A refused batch whose error has no status above (a server error).
ERROR_REASON = "error"
SAMPLE_REJECT_REASONS = ("unknown_gpu", "sampled_at_in_future", "older_than_retention", "invalid")
EVENT_REJECT_REASONS = ("occurred_at_in_future", "older_than_retention", "invalid")
NOTIFY_OUTCOMES = ("delivered", "retried", "failed", "suppressed")
RULE_LANES = ("event", "timer")

INGEST_BATCHES = Counter(
    "fleetwatch_ingest_batches",
    "Ingest batches answered, by outcome: stored, replayed (a re-sent batch id) or rejected.",
    ["outcome"],
    registry=REGISTRY,
)
INGEST_REJECTIONS = Counter(
    "fleetwatch_ingest_rejections",
    "Ingest batches refused, by reason (the HTTP status's meaning; error: a server error).",
    ["reason"],
    registry=REGISTRY,
)
INGEST_SAMPLES_REJECTED = Counter(
    "fleetwatch_ingest_samples_rejected",
    "GPU samples of accepted batches that were not stored, by reason.",
    ["reason"],
    registry=REGISTRY,
)
INGEST_EVENTS_REJECTED = Counter(
    "fleetwatch_ingest_events_rejected",
    "Events of accepted batches that were not stored, by reason (invalid: a bad value).",
    ["reason"],
    registry=REGISTRY,
)
INGEST_LEFT_OUT = Counter(
    "fleetwatch_ingest_values_left_out",
    "Values and entries of accepted batches left out because the server cannot hold them "
    "(nulled, or the entry not stored), by the list they were in (samples, events, gpus, "
    "nvlinks …) and the validation error's type.",
    ["list", "reason"],
    registry=REGISTRY,
)
INGEST_BATCH_SECONDS = Histogram(
    "fleetwatch_ingest_batch_duration_seconds",
    "Time from receiving an accepted ingest batch (stored or replayed) to its answer.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
RULE_EVALUATION_SECONDS = Histogram(
    "fleetwatch_rule_evaluation_duration_seconds",
    "Time of one evaluation of a lane of alert rules (event: event-driven rules, timer: the "
    "others), by the leading process.",
    ["lane"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
RULE_FAILURES = Counter(
    "fleetwatch_rule_failures",
    "Alert rules whose evaluation failed (skipped that time), by lane.",
    ["lane"],
    registry=REGISTRY,
)
NOTIFICATIONS = Counter(
    "fleetwatch_notifications",
    "Notification deliveries (one per alert notice and channel) by outcome: delivered, "
    "retried (not delivered yet, tried again later), failed (for good) or suppressed "
    "(silenced or acknowledged before it was sent).",
    ["outcome"],
    registry=REGISTRY,
)

# Every known label value is served from the start, at 0.
for _outcome in ("stored", "replayed", "rejected"):
    INGEST_BATCHES.labels(_outcome)
for _reason in (*REJECT_REASONS.values(), ERROR_REASON):
    INGEST_REJECTIONS.labels(_reason)
for _reason in SAMPLE_REJECT_REASONS:
    INGEST_SAMPLES_REJECTED.labels(_reason)
for _reason in EVENT_REJECT_REASONS:
    INGEST_EVENTS_REJECTED.labels(_reason)
for _lane in RULE_LANES:
    RULE_EVALUATION_SECONDS.labels(_lane)
    RULE_FAILURES.labels(_lane)
for _outcome in NOTIFY_OUTCOMES:
    NOTIFICATIONS.labels(_outcome)


def batch_accepted(
    *,
    replayed: bool,
    rejected_by_reason: dict[str, int],
    seconds: float,
    events_rejected: dict[str, int] | None = None,
    left_out_by_reason: dict[str, int] | None = None,
) -> None:
    """Count an answered batch: its outcome, the samples and events it did not store, the
    values it left out (``left_out_by_reason``: ``<list>.<reason>`` → count), its latency."""
    INGEST_BATCHES.labels("replayed" if replayed else "stored").inc()
    if not replayed:
        for reason, count in rejected_by_reason.items():
            if count:
                INGEST_SAMPLES_REJECTED.labels(reason).inc(count)
        for reason, count in (events_rejected or {}).items():
            if count:
                INGEST_EVENTS_REJECTED.labels(reason).inc(count)
        for key, count in (left_out_by_reason or {}).items():
            where, _, reason = key.rpartition(".")
            INGEST_LEFT_OUT.labels(where, reason).inc(count)
    INGEST_BATCH_SECONDS.observe(seconds)


def batch_refused(error: BaseException) -> None:
    """Count a refused batch under the reason of its error's HTTP status."""
    status = 422 if isinstance(error, RequestValidationError) else getattr(error, "status_code", 0)
    INGEST_BATCHES.labels("rejected").inc()
    INGEST_REJECTIONS.labels(REJECT_REASONS.get(status, ERROR_REASON)).inc()


def rules_evaluated(*, lane: str, seconds: float, failed: int) -> None:
    """Count one evaluation of ``lane``: its duration and its failed rules."""
    RULE_EVALUATION_SECONDS.labels(lane).observe(seconds)
    if failed:
        RULE_FAILURES.labels(lane).inc(failed)


def notifications(**outcomes: int) -> None:
    """Count deliveries by outcome (keywords of :data:`NOTIFY_OUTCOMES`)."""
    for outcome, count in outcomes.items():
        if count:
            NOTIFICATIONS.labels(outcome).inc(count)


def source() -> Any:
    """What a scrape reads the counters from: the files of every process in multiprocess mode
    (``PROMETHEUS_MULTIPROC_DIR`` set), else this process's registry. Both have
    ``collect()``."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        return MultiProcessCollector(None, path=path)
    return REGISTRY

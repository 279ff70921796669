"""The agent loop: collect every ``interval_s``, cut a batch every ``batch_interval_s`` (or at
``max_batch_samples``, or at once when the round brought a new event or a GPU that went dark
or came back), spool it, push spooled batches oldest first.

Collection runs in the caller's thread and pushing in a second one, so a slow or dead server
never delays a sample: while it is down, batches pile up in the bounded spool and are replayed
in order, with their original ``batch_id``, once it answers again. So do they while the server
refuses this node's token or hostname, or has no ingest endpoint at ``--server``: the cause and
its fix are logged at most once a minute (:mod:`agents.refusals`) until someone fixes it.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agents.collectors.base import Collector
from agents.collectors.host import HostSource
from agents.host_thinner import HostThinner
from agents.nvlink_thinner import NvlinkThinner
from agents.payload import (
    METRIC_KEYS,
    EventDict,
    Payload,
    Sample,
    as_objects,
    as_table_form,
    build_node,
    build_payload,
    encode_payload,
    format_timestamp,
    has_table_form,
    make_event,
    stamp_sent_at,
    utc_now,
)
from agents.push import Backoff, Outcome, Pusher, PushResult
from agents.refusals import (
    LoudLog,
    clock_warning,
    held_message,
    left_out_message,
    refused_for_skew,
    skew_message,
)
from agents.spool import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, Spool
from agents.topology_tracker import TopologyTracker

log = logging.getLogger(__name__)


@dataclass
class AgentConfig:
    """Settings of one agent. Durations in seconds, sizes in bytes.

    ``server_url``/``token`` may be ``None`` only for an agent that never pushes (batches then
    stay in the spool). ``shutdown_timeout_s`` bounds the last push on stop.
    ``interval_s``: GPU values are sampled this often (10 s: 3.1 MB per HGX node per day
    once packed, 5.1 MB at 5 s; docs/sizing.md); faults do not wait for it
    (``watch_interval_s``).
    ``nvlink_interval_s``: NVLink readings are sent every that many seconds, and at once when a
    link's state, peer or error counters change (an HGX node has 144 links; every 5 s they
    were 80 % of its stored bytes). ``host_interval_s``: disks, mounts, NFS mounts and NIC
    ports are read every sample but sent every that many seconds (rates averaged over it), and
    at once when a port's state or a mount changes (:mod:`agents.host_thinner`).
    ``watch_interval_s``: between rounds, the collector and the host sources are asked this
    often whether something urgent happened (an Xid in the kernel log or NVML's event set, a
    GPU gone); if so a round is collected and sent at once instead of at the next sampling
    tick (0, or not less than ``interval_s``: only at the ticks).
    ``expected_gpus``: the GPUs the node should have (``--expected-gpus``, or counted on PCI at
    start, :mod:`agents.pci_gpus`), sent with every batch; ``None``: the collector's, if any.
    ``refused_retry_s``: while the server refuses every batch for a setting (token, hostname,
    URL: :mod:`agents.refusals`), the oldest batch is tried again this often.
    """

    hostname: str
    spool_dir: Path
    server_url: str | None = None
    token: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    interval_s: float = 10.0
    batch_interval_s: float = 20.0
    max_batch_samples: int = 10_000
    spool_max_bytes: int = DEFAULT_MAX_BYTES
    spool_max_files: int = DEFAULT_MAX_FILES
    connect_timeout_s: float = 5.0
    timeout_s: float = 30.0
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    shutdown_timeout_s: float = 10.0
    topology_resend_s: float = 3600.0
    nvlink_interval_s: float = 60.0
    host_interval_s: float = 60.0
    watch_interval_s: float = 1.0
    expected_gpus: int | None = None
    refused_retry_s: float = 60.0


def snapshot_payload(
    collector: Collector,
    hostname: str,
    labels: dict[str, str],
    now: datetime | None = None,
    *,
    host_sources: Sequence[HostSource] = (),
    settle_s: float = 1.0,
    expected_gpus: int | None = None,
) -> Payload:
    """Collect from ``collector`` and ``host_sources`` and return one payload with ``sent_at``
    set (what ``fleetwatch-agent --once --print`` shows).

    Rates need two readings: when there are host sources, a first round primes their counters
    and is discarded, and the payload holds the round taken ``settle_s`` seconds later.
    """
    with tempfile.TemporaryDirectory(prefix="fleetwatch-print-") as spool:
        agent = Agent(
            AgentConfig(
                hostname=hostname,
                spool_dir=Path(spool),
                labels=dict(labels),
                topology_resend_s=0.0,  # the printed round always carries the topology
                nvlink_interval_s=0.0,  # … and the NVLinks, though the priming round read them
                host_interval_s=0.0,  # … and the host sections
                expected_gpus=expected_gpus,
            ),
            collector,
            host_sources=host_sources,
        )
        if host_sources:
            agent.collect()
            agent.take_payload()
            time.sleep(settle_s)
        agent.collect(now)
        payload = agent.take_payload()
    if payload is None:
        info = collector.node_info()
        node = build_node(hostname, labels, info, expected_gpu_count=expected_gpus)
        payload = build_payload(node, collector.inventory(), [], [])
    return stamp_sent_at(payload, now)


class Agent:
    """One node agent around ``collector``.

    Counters (ints, read them any time): ``samples_generated``, ``events_generated``,
    ``batches_spooled``, ``batches_sent`` (acknowledged with 2xx and stored),
    ``samples_acked`` (samples the server took in acknowledged batches),
    ``batches_refused_for_skew`` (acknowledged, but their readings refused as dated in the
    future: not sent, not retried), ``batches_rejected`` (permanent 4xx), ``push_attempts``,
    ``push_failures`` (retryable), ``push_refusals`` (attempts refused for a setting: the
    batches stay spooled) and the property ``batches_dropped`` (rejected + refused for skew +
    evicted from a full spool + corrupt files + batches the disk refused). ``last_status`` is
    the last HTTP status or ``None``; ``last_refusal`` what the server's refusal of this node's
    settings says to fix, ``None`` once a batch passes.

    Raises:
        OSError: the spool directory cannot be created.
    """

    def __init__(
        self,
        config: AgentConfig,
        collector: Collector,
        *,
        pusher: Pusher | None = None,
        backoff: Backoff | None = None,
        host_sources: Sequence[HostSource] = (),
    ) -> None:
        self.config = config
        self.collector = collector
        self.host_sources = list(host_sources)
        self.spool = Spool(
            config.spool_dir, max_bytes=config.spool_max_bytes, max_files=config.spool_max_files
        )
        if pusher is None and config.server_url and config.token:
            pusher = Pusher(
                config.server_url,
                config.token,
                connect_timeout_s=config.connect_timeout_s,
                timeout_s=config.timeout_s,
            )
        self.pusher = pusher
        self.backoff = backoff or Backoff(config.backoff_base_s, config.backoff_cap_s)
        self.samples_generated = 0
        self.events_generated = 0
        self.batches_spooled = 0
        self.batches_sent = 0
        self.samples_acked = 0
        self.batches_rejected = 0
        self.batches_refused_for_skew = 0
        self.push_attempts = 0
        self.push_failures = 0
        self.push_refusals = 0
        self.last_status: int | None = None
        self.last_refusal: str | None = None
        self._loud = LoudLog(log)
        self._unspoolable = 0
        self._lock = threading.Lock()
        self._push_lock = threading.Lock()
        self._wake = threading.Event()
        self._samples: list[Sample] = []
        self._events: list[EventDict] = []
        self._last_moment: datetime | None = None
        self._sections: dict[str, list[dict[str, Any]]] = {}
        self._errors: list[dict[str, str]] = []
        self._topology = TopologyTracker(config.topology_resend_s)
        self._nvlinks = NvlinkThinner(config.nvlink_interval_s)
        self._host = HostThinner(config.host_interval_s)
        #: When the current batch's window opened (monotonic): the previous cut, or the first
        #: round of all. A batch is due ``batch_interval_s`` after it, to half a round.
        self._window_opened: float | None = None
        self._urgent = False
        self._dark: dict[str, bool] = {}
        self._next_push_at = 0.0
        #: Whether the server said it reads the table form (its answers' ``bulk_forms``): the
        #: batches cut from then on are spooled in it (a batch keeps its form when re-sent).
        self.table_form = False

    @property
    def batches_dropped(self) -> int:
        """Batches lost for good: refused by the server, evicted, corrupt or unwritable."""
        return (
            self.batches_rejected
            + self.batches_refused_for_skew
            + self.spool.dropped_batches
            + self.spool.bad_files
            + self._unspoolable
        )

    @property
    def batches_unwritable(self) -> int:
        """Batches the disk refused with no older batch left to drop (or refused otherwise:
        read-only)."""
        return self._unspoolable

    @property
    def paused(self) -> bool:
        """Whether the collector asks the agent to play dead (simulated ``agent_stop``)."""
        until = self.collector.paused_until()
        return until is not None and utc_now() < until

    def collect(self, now: datetime | None = None) -> int:
        """Take one round of samples and events into the current batch; return the sample count.

        Does nothing while :attr:`paused`. A collector failure is logged and becomes an
        ``agent_error`` event instead of stopping the agent.
        """
        if self.paused:
            return 0
        taken = now or utc_now()
        moment = taken.replace(microsecond=taken.microsecond // 1000 * 1000)
        if self._last_moment is not None and moment <= self._last_moment:
            # Payload times have millisecond precision: a second round within the same
            # millisecond would repeat the (gpu, sampled_at) key, which the server dedups.
            return 0
        self._last_moment = moment
        try:
            samples = self.collector.sample(moment)
            events = self.collector.drain_events()
        except Exception as exc:
            log.exception("%s: collector failed", self.config.hostname)
            samples = []
            events = [make_event("agent_error", moment, message=f"collector failed: {exc!r}")]
        sections, host_events, errors = self._collect_node_sections(moment)
        state_changed = self._gpu_state_changed(samples)
        with self._lock:
            if self._window_opened is None:
                self._window_opened = time.monotonic()
            if events or host_events or state_changed or self._nvlinks.urgent or self._host.urgent:
                self._urgent = True
            self._samples.extend(samples)
            self._events.extend(events)
            self._events.extend(host_events)
            for name, entries in sections.items():
                self._sections.setdefault(name, []).extend(entries)
            self._errors.extend(errors)
            self.samples_generated += len(samples)
            self.events_generated += len(events) + len(host_events)
        return len(samples)

    def _gpu_state_changed(self, samples: list[Sample]) -> bool:
        """Whether a GPU went dark (every metric ``None``: lost, missing, in error, per the
        collector contract) or came back since the last round; a GPU first seen dark counts."""
        changed = False
        for sample in samples:
            dark = all(sample.get(key) is None for key in METRIC_KEYS)
            if self._dark.get(sample["gpu_uuid"], False) != dark:
                changed = True
            self._dark[sample["gpu_uuid"]] = dark
        return changed

    def _collect_node_sections(
        self, moment: datetime
    ) -> tuple[dict[str, list[dict[str, Any]]], list[EventDict], list[dict[str, str]]]:
        """NVLinks from the collector, and each host source's sections and events; a failing
        source becomes a collection error, never a stopped agent."""
        sections: dict[str, list[dict[str, Any]]] = {}
        events: list[EventDict] = []
        errors: list[dict[str, str]] = []
        try:
            links = self.collector.nvlinks(moment)
            due = self._nvlinks.due(links, moment)
            if due:
                sections["nvlinks"] = due
            errors.extend(self.collector.collection_errors())
        except Exception as exc:
            self._nvlinks.urgent = False  # not read this round: nothing changed that we know
            log.exception("%s: collector node sections failed", self.config.hostname)
            errors.append({"source": self.collector.name or "collector", "message": repr(exc)})
        host: dict[str, list[dict[str, Any]]] = {}
        for source in self.host_sources:
            try:
                for name, entries in source.collect(moment).items():
                    host.setdefault(name, []).extend(entries)
                events.extend(source.drain_events())
                errors.extend(source.collection_errors())
            except Exception as exc:
                log.exception("%s: host source %s failed", self.config.hostname, source.name)
                errors.append({"source": source.name, "message": repr(exc)})
        if self.host_sources:
            try:
                thinned = self._host.due(host, moment)
            except Exception as exc:  # never a stopped agent: this round goes as read
                log.exception("%s: thinning the host sections failed", self.config.hostname)
                errors.append({"source": "host-interval", "message": repr(exc)})
                self._host.urgent = False
                thinned = host
            for name, entries in thinned.items():
                sections.setdefault(name, []).extend(entries)
        return sections, events, errors

    def current_topology(self, now: datetime | None = None) -> dict[str, Any] | None:
        """The node's topology: the collector's GPU part plus each host source's devices and
        links (NICs); ``partial`` when a part failed. ``None`` when nothing could be read."""
        moment = now or utc_now()
        errors: list[str] = []
        topology: dict[str, Any] | None = None
        try:
            topology = self.collector.topology(moment)
        except Exception as exc:
            errors.append(f"{self.collector.name or 'collector'}: {exc!r}")
        merged: dict[str, Any] = dict(topology) if topology else {}
        devices = list(merged.get("devices", []))
        links = list(merged.get("links", []))
        for source in self.host_sources:
            try:
                extra = source.topology_devices()
            except Exception as exc:
                errors.append(f"{source.name}: {exc!r}")
                continue
            if extra:
                devices.extend(extra[0])
                links.extend(extra[1])
        if not devices and not errors:
            return None
        merged.setdefault("collected_at", format_timestamp(moment))
        merged.setdefault("source", self.collector.name or "unknown")
        merged["devices"] = devices
        merged["links"] = links
        merged["errors"] = list(merged.get("errors", [])) + errors
        merged["partial"] = bool(merged.get("partial")) or bool(errors)
        return merged

    def batch_due(self) -> bool:
        """Whether the current batch is old or big enough to be cut, or holds a new event, a
        GPU state change or an NVLink state change (a fault reaches the server at once, not a
        batch interval later).

        Old enough: ``batch_interval_s`` since the previous cut (the batch's window), less half
        a sampling round, so that a round ending a little earlier than the last one (collection
        times jitter) does not hold the batch for one more round: at the defaults (10-s rounds,
        20-s batches) every batch holds 2 rounds and is sent 20 s after the previous one."""
        with self._lock:
            if self._window_opened is None or not (self._samples or self._events or self._sections):
                return False
            age = time.monotonic() - self._window_opened
            slack = 0.5 * min(self.config.interval_s, self.config.batch_interval_s)
            return (
                self._urgent
                or age >= self.config.batch_interval_s - slack
                or len(self._samples) >= self.config.max_batch_samples
            )

    def take_payload(self) -> Payload | None:
        """Turn the current batch into a payload (``sent_at`` unset; its bulk lists in the
        table form once the server said it reads it: :attr:`table_form`) and start a new
        batch; ``None`` when the batch holds nothing."""
        with self._lock:
            samples, events = self._samples, self._events
            sections, errors = self._sections, self._errors
            self._samples, self._events = [], []
            self._window_opened = time.monotonic()
            self._urgent = False
            self._sections, self._errors = {}, []
        if not samples and not events and not sections:
            return None
        try:
            gpus = self.collector.inventory()
            info = self.collector.node_info()
        except Exception:
            log.exception("%s: collector inventory failed", self.config.hostname)
            gpus, info = [], {"driver_version": None, "cuda_version": None}
        node = build_node(
            self.config.hostname,
            self.config.labels,
            info,
            expected_gpu_count=self.config.expected_gpus,
        )
        extra: dict[str, Any] = dict(sections)
        extra["collection"] = {"collector": self.collector.name or "unknown", "errors": errors}
        topology = self._topology.due(self.current_topology())
        if topology is not None:
            extra["topology"] = topology
        payload = build_payload(node, gpus, samples, events, sections=extra)
        return as_table_form(payload) if self.table_form else payload

    def cut_batch(self) -> Path | None:
        """Write the current batch to the spool and wake the pusher; return the file or ``None``
        (empty batch, or the disk refused it: logged and counted as dropped)."""
        payload = self.take_payload()
        if payload is None:
            return None
        try:
            path = self.spool.put(payload)
        except OSError as exc:
            with self._lock:
                self._unspoolable += 1
            log.error(
                "%s: cannot spool batch %s: %s", self.config.hostname, payload["batch_id"], exc
            )
            return None
        if path is not None:
            with self._lock:
                self.batches_spooled += 1
        self._wake.set()
        return path

    def push_pending(self, *, deadline: float | None = None, ignore_backoff: bool = False) -> bool:
        """Send spooled batches oldest first until the spool is empty (return ``True``) or an
        attempt fails retryably or is refused for a setting (the batch stays), the backoff is
        still running or ``deadline`` (``time.monotonic`` seconds) passes (return ``False``).
        Permanently refused batches are logged and dropped. A batch collected under another
        ``--hostname`` is sent under this one (the setting fixed after a 403).
        """
        if self.pusher is None or self.paused:
            return False
        wait = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._push_lock.acquire(timeout=wait):
            return False
        try:
            while True:
                now = time.monotonic()
                if not ignore_backoff and now < self._next_push_at:
                    return False
                if deadline is not None and now >= deadline:
                    return False
                batch = self.spool.oldest()
                if batch is None:
                    return True
                body = encode_payload(stamp_sent_at(self._as_this_node(batch.payload)))
                budget = None if deadline is None else max(0.1, deadline - now)
                result = self.pusher.push(body, timeout_s=budget)
                with self._lock:
                    self.push_attempts += 1
                    self.last_status = result.status
                if result.outcome is Outcome.PERMANENT and has_table_form(batch.payload):
                    result = self._push_as_objects(self.pusher, batch.payload, result, budget)
                if result.outcome is Outcome.OK:
                    self.spool.remove(batch)
                    self.backoff.reset()
                    self._next_push_at = 0.0
                    self._accepted(batch.sample_count, result.answer)
                elif result.outcome is Outcome.HOLD:
                    self._held(result)
                    return False
                elif result.outcome is Outcome.PERMANENT:
                    self.spool.remove(batch)
                    with self._lock:
                        self.batches_rejected += 1
                    log.error(
                        "%s: server refused batch %s with HTTP %s, dropped (re-sending cannot "
                        "succeed): %s",
                        self.config.hostname,
                        batch.batch_id,
                        result.status,
                        result.detail,
                    )
                else:
                    delay = self.backoff.next_delay(result.retry_after_s)
                    self._next_push_at = time.monotonic() + delay
                    with self._lock:
                        self.push_failures += 1
                    level = logging.WARNING if self.backoff.failures % 10 == 1 else logging.DEBUG
                    log.log(
                        level,
                        "%s: push of batch %s failed (%s, HTTP %s), %d batch(es) spooled; "
                        "retrying in %.1f s",
                        self.config.hostname,
                        batch.batch_id,
                        result.detail[:200],
                        result.status,
                        len(self.spool),
                        delay,
                    )
                    return False
        finally:
            self._push_lock.release()

    def _push_as_objects(
        self, pusher: Pusher, payload: Payload, refused: PushResult, budget: float | None
    ) -> PushResult:
        """A batch in the table form refused for good (a server that no longer reads it:
        downgraded, or another one behind the same address): stop using the form and send the
        same batch at once as lists of objects; returns that attempt's result."""
        self.table_form = False
        log.warning(
            "%s: server refused batch %s in the table form (HTTP %s: %s); sending it and the "
            "next batches as lists of objects",
            self.config.hostname,
            payload.get("batch_id"),
            refused.status,
            refused.detail[:200],
        )
        body = encode_payload(stamp_sent_at(self._as_this_node(as_objects(payload))))
        result = pusher.push(body, timeout_s=budget)
        with self._lock:
            self.push_attempts += 1
            self.last_status = result.status
        return result

    def _accepted(self, sample_count: int, answer: dict[str, Any] | None) -> None:
        """Count an acknowledged batch: sent, or refused for clock skew (said loudly); learn
        from the answer whether the server reads the table form."""
        self.last_refusal = None
        forms = (answer or {}).get("bulk_forms")
        if not self.table_form and isinstance(forms, list) and "table" in forms:
            self.table_form = True
            log.info(
                "%s: the server reads the table form: next batches go in it", self.config.hostname
            )
        refused = refused_for_skew(answer)
        rejected = (answer or {}).get("samples_rejected")
        rejected = rejected if isinstance(rejected, int) and 0 <= rejected <= sample_count else 0
        with self._lock:
            self.samples_acked += sample_count - rejected
            if refused:
                self.batches_refused_for_skew += 1
            else:
                self.batches_sent += 1
        hostname = self.config.hostname
        if refused and answer is not None:
            self._loud.log(logging.ERROR, "skew", skew_message(answer, refused, hostname=hostname))
        elif (warning := clock_warning(answer, hostname=hostname)) is not None:
            self._loud.log(logging.WARNING, "clock", warning)
        if (left_out := left_out_message(answer, hostname=hostname)) is not None:
            self._loud.log(logging.WARNING, "left_out", left_out)

    def _held(self, result: PushResult) -> None:
        """A refusal no batch can pass until a setting is fixed: keep the batches, try again
        in ``refused_retry_s``, say what to fix (at most once a minute per status)."""
        message = held_message(
            result.status,
            result.detail,
            hostname=self.config.hostname,
            server_url=self.config.server_url or "",
        )
        self.last_refusal = message
        self._next_push_at = time.monotonic() + self.config.refused_retry_s
        with self._lock:
            self.push_refusals += 1
        self._loud.log(logging.ERROR, f"refused {result.status}", message)

    def _as_this_node(self, payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` under this agent's ``--hostname``: batches spooled under another (refused
        with 403 until the flag was fixed) are this machine's readings all the same."""
        node = payload.get("node")
        if not isinstance(node, dict) or node.get("hostname") == self.config.hostname:
            return payload
        message = (
            f"spooled batches of host {node.get('hostname')!r} are sent as {self.config.hostname!r}"
        )
        self._loud.log(logging.WARNING, "renamed", message)
        return {**payload, "node": {**node, "hostname": self.config.hostname}}

    def run_once(self, extra_events: Sequence[EventDict] = ()) -> bool:
        """Collect one round (with ``extra_events``: the self-test's), spool it and push
        everything pending now, backoff or not; return whether the spool is empty afterwards."""
        self.collect()
        if extra_events:
            with self._lock:
                self._events.extend(extra_events)
                self.events_generated += len(extra_events)
        self.cut_batch()
        return self.push_pending(ignore_backoff=True)

    def run(self, stop: threading.Event) -> None:
        """Collect and push until ``stop`` is set; then spool the partial batch and try one last
        push within ``shutdown_timeout_s``."""
        pusher = threading.Thread(
            target=self._push_loop, args=(stop,), name=f"push-{self.config.hostname}", daemon=True
        )
        pusher.start()
        next_tick = time.monotonic()
        try:
            while not stop.is_set():
                self.collect()
                if self.batch_due():
                    self.cut_batch()
                next_tick += self.config.interval_s
                if next_tick < time.monotonic():  # fell behind (paused, slow): skip, never burst
                    next_tick = time.monotonic()
                self.wait_watching(stop, next_tick)
        finally:
            self.cut_batch()
            self._wake.set()
            deadline = time.monotonic() + self.config.shutdown_timeout_s
            pusher.join(timeout=self.config.shutdown_timeout_s)
            self.push_pending(deadline=deadline, ignore_backoff=True)
            self.collector.close()

    def wait_watching(self, stop: threading.Event, until: float) -> int:
        """Wait until ``until`` (``time.monotonic()`` seconds) or ``stop``; every
        ``watch_interval_s`` ask :meth:`urgent_pending` and, when it says so, collect a round
        at once and cut its batch (it is urgent: the pusher sends it now). Returns the early
        rounds collected. At most one early round per watch interval, so a flood of Xids
        cannot make the agent collect without pause."""
        watch = self.config.watch_interval_s
        early = 0
        while not stop.is_set():
            left = until - time.monotonic()
            if left <= 0:
                break
            if not 0 < watch < self.config.interval_s:
                stop.wait(left)
                break
            if stop.wait(min(left, watch)) or time.monotonic() >= until:
                break
            if not self.paused and self.urgent_pending():
                self.collect()
                self.cut_batch()
                early += 1
        return early

    def urgent_pending(self) -> bool:
        """Whether the collector or a host source has something urgent for the next round; a
        source that fails to answer is logged and counts as no."""
        sources: list[Collector | HostSource] = [self.collector, *self.host_sources]
        for source in sources:
            try:
                if source.urgent_pending():
                    return True
            except Exception:
                log.exception("%s: %s: urgent check failed", self.config.hostname, source.name)
        return False

    def _push_loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            backoff_left = self._next_push_at - time.monotonic()
            self._wake.wait(min(1.0, backoff_left) if backoff_left > 0.01 else 1.0)
            self._wake.clear()
            if stop.is_set():
                return
            try:
                self.push_pending()
            except Exception:
                log.exception("%s: push loop error", self.config.hostname)

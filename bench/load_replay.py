"""A light load client: many agents' real batches replayed over asyncio, one client thread.

Each agent (own hostname, own ingest token, own GPUs: UUIDs, PCI addresses, serials as its
simulated node has them) gets its batches from the real agent code once
(:func:`bench.replay_batches.agent_templates`), then sends one every batch period (the agent
loop's: :func:`~bench.replay_batches.rounds_per_batch` rounds of ``interval_s``), rebuilt with a
new ``batch_id``, its rounds' times and moved values (:func:`~bench.replay_batches.rebuild`),
gzip-compressed and posted with the agent's headers, at the moment the agent would send it
(its last round); agents' phases are spread evenly over the period. Failed pushes are kept and
retried oldest first as the agent does (:mod:`agents.push`: the same status classes, a total
deadline of ``timeout_s`` per push, backoff
with full jitter honouring ``Retry-After``; a refusal for a setting, 401/403/404, retried every
``refused_retry_s``); other refusals are dropped and counted.

What it is not: the agent loop itself (no collector thread per agent, no spool on disk, no
urgent batches: the simulators inject no faults), and its pushes reuse keep-alive connections
from one pool (the agent opens a connection per push).

    fleet = ReplayFleet(nodes, server_url=url, work=tmp)   # templates made here
    fleet.start(); ...; fleet.stop()                        # stop: one last push each
    fleet.totals(); fleet.latencies_s; fleet.check_rows(db_url)
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from agents import __version__
from agents.fleetspec import FleetNode
from agents.payload import Payload, encode_payload, stamp_sent_at
from agents.push import INGEST_PATH, Backoff, Outcome, classify_status, parse_retry_after
from bench.replay_batches import Template, agent_templates, rebuild, rounds_per_batch

#: Idle keep-alive connections are closed before the server's (uvicorn: 5 s) would be.
KEEPALIVE_EXPIRY_S = 4.0


@dataclass
class Pending:
    """A batch cut and not yet acknowledged: its payload, samples and ``(uuid, sampled_at)``."""

    payload: Payload
    keys: list[tuple[str, str]]


@dataclass
class ReplayAgent:
    """One replayed agent: its batches (:class:`~bench.replay_batches.Template`), its phase in
    the batch period (s), its queue of unacknowledged batches and its backoff."""

    node: FleetNode
    templates: list[Template]
    phase_s: float
    rng: random.Random
    queue: deque[Pending] = field(default_factory=deque)
    backoff: Backoff = field(default_factory=Backoff)
    next_push_at: float = 0.0
    energy_j: dict[str, float] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Counters:
    """What the client counted (samples, batches, pushes), the acknowledged pushes' durations
    (s) and the failed pushes by cause (``HTTP 503``, ``ReadTimeout`` …)."""

    samples_generated: int = 0
    samples_acked: int = 0
    batches_sent: int = 0
    batches_dropped: int = 0
    push_failures: int = 0
    push_refusals: int = 0
    samples_partly_refused: int = 0
    latencies_s: list[float] = field(default_factory=list)
    failed_by_cause: Counter[str] = field(default_factory=Counter)
    acked_keys: set[tuple[str, str]] = field(default_factory=set)


class ReplayFleet:
    """Replayed agents for ``nodes`` (tokens in ``FleetNode.token``) pushing to ``server_url``.

    Templates are made in the constructor (about 20 ms per 8-GPU node); :meth:`start` runs the
    event loop in one thread; :meth:`stop` ends the sending, gives every agent one last push of
    its queue (backoff or not, within ``flush_timeout_s``) and waits for the thread.
    """

    def __init__(
        self,
        nodes: Sequence[FleetNode],
        *,
        server_url: str,
        work: Path,
        interval_s: float = 10.0,
        batch_interval_s: float = 20.0,
        backoff_cap_s: float = 10.0,
        refused_retry_s: float = 60.0,
        timeout_s: float = 30.0,
        flush_timeout_s: float = 60.0,
    ) -> None:
        self.url = server_url.rstrip("/") + INGEST_PATH
        self.interval_s = interval_s
        self.period_s = rounds_per_batch(interval_s, batch_interval_s) * interval_s
        self.refused_retry_s = refused_retry_s
        self.timeout_s = timeout_s
        self.flush_timeout_s = flush_timeout_s
        self.counters = Counters()
        start = datetime.now(UTC).replace(microsecond=0)
        self.agents = [
            ReplayAgent(
                node,
                agent_templates(
                    node,
                    start,
                    interval_s=interval_s,
                    batch_interval_s=batch_interval_s,
                    work=work,
                ),
                phase_s=i * self.period_s / len(nodes),
                rng=random.Random(node.hostname),
                backoff=Backoff(cap_s=backoff_cap_s),
            )
            for i, node in enumerate(nodes)
        ]
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()

    # -- the caller's thread ---------------------------------------------------------------

    def start(self) -> None:
        """Start sending (the event loop's thread)."""
        self._thread = threading.Thread(target=self._run, name="load-replay", daemon=True)
        self._thread.start()
        self._ready.wait(30)

    def stop(self, timeout_s: float = 120.0) -> None:
        """Stop sending, flush every queue once and wait for the thread (at most
        ``timeout_s``)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop_all)
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def totals(self) -> dict[str, int]:
        """The counters summed over the fleet (the keys of ``SimFleet.totals`` that apply),
        with ``batches_pending``: batches still unacknowledged."""
        c = self.counters
        return {
            "samples_generated": c.samples_generated,
            "samples_acked": c.samples_acked,
            "batches_sent": c.batches_sent,
            "batches_dropped": c.batches_dropped,
            "push_failures": c.push_failures,
            "push_refusals": c.push_refusals,
            "batches_pending": sum(len(a.queue) for a in self.agents),
        }

    @property
    def latencies_s(self) -> list[float]:
        """Durations of acknowledged pushes (request to answer read), seconds."""
        return self.counters.latencies_s

    def check_rows(self, stored: set[tuple[str, datetime]]) -> tuple[int, int]:
        """Compare the acknowledged samples with ``stored`` (``(gpu uuid, sampled_at)`` of
        every row): (acknowledged but not stored, stored but not acknowledged)."""
        acked = {(u, datetime.fromisoformat(t)) for u, t in self.counters.acked_keys}
        return len(acked - stored), len(stored - acked)

    # -- the event loop's thread -----------------------------------------------------------

    def _stop_all(self) -> None:
        assert self._stop is not None
        self._stop.set()
        for agent in self.agents:
            agent.wake.set()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        limits = httpx.Limits(
            max_connections=len(self.agents),
            max_keepalive_connections=min(len(self.agents), 200),
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
        )
        timeout = httpx.Timeout(self.timeout_s, connect=5.0)
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
            started_mono, started_utc = time.monotonic(), datetime.now(UTC)
            await asyncio.gather(
                *(self._agent(a, client, started_mono, started_utc) for a in self.agents)
            )

    async def _agent(
        self, agent: ReplayAgent, client: httpx.AsyncClient, t0: float, t0_utc: datetime
    ) -> None:
        """Cut ``agent``'s batches on time while its pusher sends them (the agent's two
        threads: a slow server never delays a batch), then one last push of its queue."""
        assert self._stop is not None
        pusher = asyncio.create_task(self._pusher(agent, client))
        batch = 0
        while True:
            first_s = agent.phase_s + batch * self.period_s
            due = t0 + first_s + self.period_s - self.interval_s  # its last round
            try:
                await asyncio.wait_for(self._stop.wait(), max(0.0, due - time.monotonic()))
                break
            except TimeoutError:
                pass
            self._cut(agent, batch, t0_utc + timedelta(seconds=first_s))
            batch += 1
            agent.wake.set()
        await pusher  # its push in flight ends (answer or timeout) first
        deadline = time.monotonic() + self.flush_timeout_s
        await self._push_pending(agent, client, deadline=deadline)

    async def _pusher(self, agent: ReplayAgent, client: httpx.AsyncClient) -> None:
        """Push ``agent``'s queue when a batch is cut or its backoff ends, until the stop."""
        assert self._stop is not None
        while not self._stop.is_set():
            wait_s = max(0.0, agent.next_push_at - time.monotonic()) if agent.queue else None
            if wait_s is None or wait_s > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(agent.wake.wait(), wait_s)
            agent.wake.clear()
            if not self._stop.is_set() and agent.queue and time.monotonic() >= agent.next_push_at:
                await self._push_pending(agent, client)

    def _cut(self, agent: ReplayAgent, batch: int, first_at: datetime) -> None:
        templates = agent.templates
        template = templates[0] if batch == 0 else templates[1 + (batch - 1) % (len(templates) - 1)]
        payload = rebuild(template, first_at, agent.rng, agent.energy_j, self.interval_s)
        keys = [(s["gpu_uuid"], s["sampled_at"]) for s in payload["samples"]]
        agent.queue.append(Pending(payload, keys))
        self.counters.samples_generated += len(keys)

    async def _push_pending(
        self, agent: ReplayAgent, client: httpx.AsyncClient, *, deadline: float | None = None
    ) -> None:
        """Push ``agent``'s queue oldest first until it is empty, a push fails or is refused
        for a setting (the batch stays; the next try after the backoff), or ``deadline``."""
        c = self.counters
        while agent.queue and (deadline is None or time.monotonic() < deadline):
            pending = agent.queue[0]
            outcome, retry_after, answer, took, cause = await self._post(
                agent, client, pending.payload
            )
            if outcome is not Outcome.OK:
                c.failed_by_cause[cause] += 1
            if outcome is Outcome.OK:
                agent.queue.popleft()
                agent.backoff.reset()
                agent.next_push_at = 0.0
                rejected = (answer or {}).get("samples_rejected")
                rejected = rejected if isinstance(rejected, int) else 0
                c.latencies_s.append(took)
                c.batches_sent += 1
                c.samples_acked += len(pending.keys) - rejected
                if rejected:
                    c.samples_partly_refused += len(pending.keys)
                else:
                    c.acked_keys.update(pending.keys)
            elif outcome is Outcome.PERMANENT:
                agent.queue.popleft()
                c.batches_dropped += 1
            elif outcome is Outcome.HOLD:
                c.push_refusals += 1
                agent.next_push_at = time.monotonic() + self.refused_retry_s
                return
            else:
                c.push_failures += 1
                agent.next_push_at = time.monotonic() + agent.backoff.next_delay(retry_after)
                return

    async def _post(
        self, agent: ReplayAgent, client: httpx.AsyncClient, payload: Payload
    ) -> tuple[Outcome, float | None, dict[str, Any] | None, float, str]:
        """POST one batch as the agent does (``sent_at`` stamped now, gzip level 6); its
        outcome, ``Retry-After`` (s), a 2xx answer's JSON object, the seconds it took and what
        answered (``HTTP 200``, or the exception's class: ``ReadTimeout`` …)."""
        body = gzip.compress(encode_payload(stamp_sent_at(payload)), compresslevel=6)
        headers = {
            "Authorization": f"Bearer {agent.node.token}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            "User-Agent": f"fleetwatch-agent/{__version__} (load-replay)",
        }
        started = time.perf_counter()
        try:
            # The agent's total deadline (agents.transport.Deadline); httpx's are per read.
            post = client.post(self.url, content=body, headers=headers)
            response = await asyncio.wait_for(post, self.timeout_s)
        except TimeoutError:
            return Outcome.RETRY, None, None, time.perf_counter() - started, "timeout"
        except httpx.HTTPError as exc:
            return Outcome.RETRY, None, None, time.perf_counter() - started, type(exc).__name__
        took = time.perf_counter() - started
        outcome = classify_status(response.status_code)
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        answer = None
        if outcome is Outcome.OK:
            try:
                parsed = response.json()
            except ValueError:
                parsed = None
            answer = parsed if isinstance(parsed, dict) else None
        return outcome, retry_after, answer, took, f"HTTP {response.status_code}"

"""Helpers of the notification tests: a local HTTP receiver that answers from a script of
responses (status, headers, body, delay), or like a rate-limited service (:class:`RateLimit`),
and records every request; alert rows to notify."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    """One scripted answer: status, headers, body, and seconds to wait before answering."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Received:
    """One request as received (``at``: ``time.monotonic()``)."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    status: int = 0
    method: str = "POST"

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


class Receiver:
    """A threaded HTTP server on 127.0.0.1; ``script`` answers requests in order (the last
    one repeats); ``requests`` are what came in. ``url`` is its base URL."""

    def __init__(
        self,
        script: list[Answer] | None = None,
        port: int = 0,
        respond: Callable[[float], Answer] | None = None,
        serve: Callable[[Received], Answer] | None = None,
    ) -> None:
        self.script = list(script or [Answer()])
        self.respond = respond
        self.serve = serve
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with owner._lock:
                    at = time.monotonic()
                    got = Received(self.path, dict(self.headers), body, at, 0, self.command)
                    if owner.serve is not None:
                        answer = owner.serve(got)
                    elif owner.respond is not None:
                        answer = owner.respond(at)
                    else:
                        answer = owner.script.pop(0) if len(owner.script) > 1 else owner.script[0]
                    owner.requests.append(
                        Received(
                            self.path, dict(self.headers), body, at, answer.status, self.command
                        )
                    )
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                try:
                    self.send_response(answer.status)
                    for k, v in answer.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            do_PATCH = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Receiver:
        """Serve in a thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (the port refuses connections afterwards)."""
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[Any]:
        """Every request body parsed as JSON, in arrival order."""
        with self._lock:
            return [r.json() for r in self.requests]


class RateLimit:
    """Answers like Discord's webhook bucket: at most ``limit`` accepted requests in any
    ``window_s`` seconds; above it a 429 with ``Retry-After`` (whole seconds, rounded up) and
    a JSON ``retry_after`` (float seconds) until the oldest leaves the window.
    ``ignored_holds`` counts requests that arrived more than ``grace_s`` after a 429 and
    before the wait it announced was over (a client not honouring it)."""

    def __init__(self, limit: int, window_s: float, *, grace_s: float = 0.15) -> None:
        self.limit, self.window_s, self.grace_s = limit, window_s, grace_s
        self.accepted: list[float] = []
        self.holds: list[tuple[float, float]] = []
        self.ignored_holds = 0
        self.too_many = 0

    def __call__(self, at: float) -> Answer:
        if any(sent + self.grace_s < at < until for sent, until in self.holds):
            self.ignored_holds += 1
        recent = [t for t in self.accepted if t > at - self.window_s]
        if len(recent) < self.limit:
            self.accepted.append(at)
            return Answer(204)
        wait = recent[0] + self.window_s - at
        self.holds.append((at, at + wait))
        self.too_many += 1
        body = json.dumps({"message": "You are being rate limited.", "retry_after": wait})
        headers = {"Retry-After": str(math.ceil(wait)), "Content-Type": "application/json"}
        return Answer(429, body.encode(), headers)


@contextmanager
def receiver(
    script: list[Answer] | None = None,
    port: int = 0,
    respond: Callable[[float], Answer] | None = None,
    serve: Callable[[Received], Answer] | None = None,
) -> Iterator[Receiver]:
    """A started :class:`Receiver`, stopped on exit; ``serve`` answers each request from what
    it holds (a fake service API), else ``respond`` from the time, else the ``script``."""
    r = Receiver(script, port, respond, serve).start()
    try:
        yield r
    finally:
        r.stop()


def wipe_notify(url: str) -> None:
    """Delete channels (routes and deliveries cascade) and every alerting row."""
    from sqlalchemy import delete

    from app.alerts.models import AlertInhibitRule, AlertRule, AlertSilence
    from app.db import make_engine, make_session_factory, session_scope
    from app.notify.models import NotifyChannel

    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            for model in (NotifyChannel, AlertRule, AlertSilence, AlertInhibitRule):
                session.execute(delete(model))
    finally:
        engine.dispose()


class Alerts:
    """Writes alert rules, instances and events the way the evaluator does (instance update
    and event in one transaction, then :func:`app.notify.outbox.enqueue_events`)."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory
        self.rules: dict[str, int] = {}

    def rule(self, name: str, *, severity: str = "critical", team: str | None = None) -> int:
        """Create a rule (once) and return its id."""
        from app.alerts.models import AlertRule
        from app.db import session_scope, utcnow

        if name not in self.rules:
            with session_scope(self.factory) as session:
                now = utcnow()
                rule = AlertRule(
                    name=name,
                    kind="threshold",
                    severity=severity,
                    owner_team=team,
                    enabled=True,
                    spec={"name": name, "runbook": "gpu-lost"},
                    source="api",
                    created_at=now,
                    updated_at=now,
                )
                session.add(rule)
                session.flush()
                self.rules[name] = rule.id
        return self.rules[name]

    def transition(
        self,
        rule: str,
        host: str,
        to_state: str,
        *,
        from_state: str | None = None,
        cluster: str = "c1",
        severity: str = "critical",
        team: str | None = None,
        silenced: bool = False,
        acked: bool = False,
        extra: dict[str, str] | None = None,
    ) -> int:
        """Move the (rule, host) instance to ``to_state`` with its event; returns the
        instance id. ``extra`` labels (a GPU's ``gpu_uuid`` …) join the instance's labels and
        its fingerprint."""
        from sqlalchemy import select

        from app.alerts.models import AlertEvent, AlertInstance
        from app.db import session_scope, utcnow
        from app.notify.outbox import enqueue_events

        rule_id = self.rule(rule, severity=severity, team=team)
        now = utcnow()
        labels = {
            "alertname": rule,
            "severity": severity,
            "owner_team": team or "",
            "hostname": host,
            "cluster": cluster,
            **(extra or {}),
        }
        fingerprint = "/".join([host, *sorted((extra or {}).values())])
        with session_scope(self.factory) as session:
            inst = session.scalar(
                select(AlertInstance).where(
                    AlertInstance.rule_id == rule_id, AlertInstance.fingerprint == fingerprint
                )
            )
            if inst is None:
                inst = AlertInstance(
                    rule_id=rule_id, fingerprint=fingerprint, state="inactive", labels=labels
                )
                session.add(inst)
            prev = from_state or inst.state
            inst.state, inst.labels, inst.summary = to_state, labels, f"{rule} on {host}"
            inst.description, inst.value, inst.last_evaluated_at = "", 1.0, now
            inst.silenced, inst.acked = silenced, acked
            if to_state == "firing":
                inst.fired_at = now
            if to_state == "resolved":
                inst.resolved_at = now
            session.flush()
            session.add(
                AlertEvent(
                    instance_id=inst.id,
                    rule_id=rule_id,
                    at=now,
                    from_state=prev,
                    to_state=to_state,
                    value=1.0,
                    severity=severity,
                    labels=labels,
                    summary=inst.summary,
                    silenced=silenced,
                    acked=acked,
                )
            )
            enqueue_events(session, rule_id=rule_id, at=now)
            return inst.id

    def fire_many(
        self, rule: str, hosts: list[str], *, cluster: str = "c1", summary: str = ""
    ) -> None:
        """``hosts`` start firing on ``rule`` together, in one transaction (one group);
        the summary is ``"<rule> on <host>"`` followed by ``summary``."""
        from app.alerts.models import AlertEvent, AlertInstance
        from app.db import session_scope, utcnow
        from app.notify.outbox import enqueue_events

        rule_id = self.rule(rule)
        now = utcnow()
        with session_scope(self.factory) as session:
            for host in hosts:
                labels = {
                    "alertname": rule,
                    "severity": "critical",
                    "owner_team": "",
                    "hostname": host,
                    "cluster": cluster,
                }
                inst = AlertInstance(
                    rule_id=rule_id, fingerprint=host, state="firing", labels=labels
                )
                inst.summary, inst.description = f"{rule} on {host}{summary}", ""
                inst.value = 1.0
                inst.last_evaluated_at = inst.fired_at = now
                session.add(inst)
                session.flush()
                event = AlertEvent(
                    instance_id=inst.id,
                    rule_id=rule_id,
                    at=now,
                    from_state="pending",
                    to_state="firing",
                    value=1.0,
                    severity="critical",
                    labels=labels,
                    summary=inst.summary,
                    silenced=False,
                    acked=False,
                )
                session.add(event)
            enqueue_events(session, rule_id=rule_id, at=now)

"""One evaluation of every enabled rule against the stored data, in the caller's transaction:
observations per rule, the state machine per instance, and for every transition the instance
update and its ``alert_event`` row together (the caller commits once)."""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from sqlalchemy import String, Table, bindparam, insert, select, text, update
from sqlalchemy.orm import Session

from app.alerts import bulk_writes, template_values
from app.alerts.context import EvalContext, Observation, fingerprint, load_context
from app.alerts.instance_reads import (
    AT,
    ActiveInstanceCache,
    active_instances,
    any_of,
    read_columns,
)
from app.alerts.kinds import observe, shared
from app.alerts.lifecycle import InstanceState, Timing, step
from app.alerts.models import AlertEvent, AlertInstance, AlertRule
from app.alerts.silences import Mutes, active_silences
from app.alerts.spec import RuleSpec, code_named
from app.db import utcnow
from app.fleet import retire
from app.gc_tuning import without_collection
from app.health import actions
from app.health.rules import HealthRules
from app.maintenance import service as maintenance
from app.notify import outbox as notify_outbox
from app.series.recent_gpu import RecentGpuSamples

log = logging.getLogger(__name__)
Item = TypeVar("Item", bound=tuple[Any, ...])
Result = TypeVar("Result")
#: Postgres ``work_mem`` of an evaluation's transaction.
EVAL_WORK_MEM = "64MB"
#: A steady instance's value and texts are rewritten at most this often, seconds (a window's
#: average moves with every sample: rewriting them each tick was thousands of rows every 10 s
#: at 1,000 nodes); a change of state, labels or silencing is written at once.
VALUE_REFRESH_S = 60.0
_VALUE_REFRESH = timedelta(seconds=VALUE_REFRESH_S)
TEMPLATE_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: The template field of an entity's suggested repair (:mod:`app.health.actions`).
ACTION_FIELD = "{suggested_action}"


@dataclass
class EvaluationReport:
    """What one evaluation did: rules evaluated, rules that failed (name → error), transitions
    written, and the seconds it took, in all and per phase (``phases_s``: ``context`` the
    inventory, ``observe`` every rule's observations, ``instances`` the active instances read,
    ``apply`` the state machine and the writes)."""

    rules: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    transitions: int = 0
    duration_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)

    def lap(self, phase: str, since: float) -> float:
        """Add the seconds from ``since`` to now to ``phase``; returns now."""
        now = time.perf_counter()
        self.phases_s[phase] = self.phases_s.get(phase, 0.0) + now - since
        return now


def render(template: str, values: dict[str, Any]) -> str:
    """``{name}`` fields replaced by ``values`` (unknown names left as written; a known name
    whose value is None as ``n/a``). Plain substitution, never ``str.format``: templates are
    user input."""
    literals, names = _parsed(template)
    if not names:
        return template
    out = [literals[0]]
    for name, literal in zip(names, literals[1:], strict=True):
        v = values.get(name)
        if v is None:
            out.append("{" + name + "}" if name not in values else "n/a")
        else:
            out.append(template_values.rounded(v) if isinstance(v, float) else str(v))
        out.append(literal)
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def _parsed(template: str) -> tuple[list[str], list[str]]:
    """``template`` split once into its literal parts and the field names between them (a
    regular-expression substitution per instance and tick was ~0.1 s a tick at 20,000
    active instances)."""
    parts = TEMPLATE_FIELD.split(template)
    return parts[0::2], parts[1::2]


def instance_labels(spec: RuleSpec, obs: Observation) -> dict[str, str]:
    """The labels of an instance: the entity's, plus ``alertname``, ``severity`` and
    ``owner_team`` (what silences match on)."""
    return {
        **obs.labels,
        "alertname": spec.name,
        "severity": spec.severity,
        "owner_team": spec.owner_team or "",
    }


def texts(spec: RuleSpec, obs: Observation, labels: dict[str, str]) -> tuple[str, str]:
    """The rule's summary and description filled in for ``obs``; an alert of a self-test fault
    (label ``test`` ``true``, :mod:`app.alerts.kinds.health`) says so in both."""
    threshold = getattr(spec.condition, "threshold", None)
    values: dict[str, Any] = {
        **labels,
        "rule": spec.name,
        "entity": obs.entity,
        "value": obs.value,
        "threshold": threshold,
        "suggested_action": obs.action,
        "value_duration": None if obs.value is None else template_values.duration(obs.value),
    }
    summary, description = render(spec.summary, values), render(spec.description, values)
    if labels.get("test") == "true":
        summary = f"[TEST] {summary}"
        description = f"{SELF_TEST_NOTE} {description}"
    return summary, description


#: How an alert of a self-test fault starts its description.
SELF_TEST_NOTE = (
    "TEST — a self-test fault (fleetwatch-agent --inject-test-xid), not a real one: this page "
    "proves the alert path; it resolves by itself within the self-test window."
)


def wants_action(spec: RuleSpec) -> bool:
    """Whether the rule's texts name ``{suggested_action}``."""
    return ACTION_FIELD in spec.summary or ACTION_FIELD in spec.description


def with_actions(ctx: EvalContext, spec: RuleSpec, found: list[Observation]) -> list[Observation]:
    """``found`` with the suggested repair of each entity whose condition is met, from its
    current health (the stored health, read once per evaluation): the strongest action of its
    reasons the rule's ``action_codes`` name (all of them when it names none) — a GPU's own
    (``gpu_uuid`` label), a node's own and its GPUs'. Entities not met are left as they are
    (a threshold rule observes every GPU of the fleet; only met ones become alerts).
    Health-kind observations carry theirs already."""
    if not any(obs.met for obs in found):
        return found
    health = ctx.health()
    wanted = spec.action_codes
    out = []
    for obs in found:
        node = health.get(obs.labels.get("hostname", "")) if obs.met else None
        if node is None:
            out.append(obs)
            continue
        uuid = obs.labels.get("gpu_uuid")
        if uuid:
            found_reasons = [r for g in node.gpus if g.uuid == uuid for r in g.reasons]
        else:
            found_reasons = list(node.reasons)
        chosen = [r.action for r in found_reasons if not wanted or code_named(r.code, wanted)]
        out.append(obs._replace(action=actions.sentence(actions.strongest(chosen))))
    return out


def condition_of(spec: RuleSpec, obs: Observation | None) -> bool | None:
    """The state machine's input: False when the entity was not observed, the observation's
    ``met``, or for no data the rule's ``no_data`` (ok → False, firing → True, keep → None)."""
    if obs is None:
        return False
    if obs.met is not None:
        return obs.met
    return {"ok": False, "firing": True, "keep": None}[spec.no_data]


_T = cast(Table, AlertInstance.__table__)


def apply_rule(
    session: Session,
    *,
    rule_id: int,
    spec: RuleSpec,
    observations: list[Observation],
    mutes: Mutes,
    now: datetime,
    active: dict[str, Any],
    notify: bool = True,
    gone_hosts: frozenset[str] = frozenset(),
) -> int:
    """Step every instance of one rule with this evaluation's ``observations``, writing each
    transition and its event; returns the number of transitions written. ``active``: the
    rule's pending and firing instances by fingerprint (:func:`active_instances`); the
    observed ones not among them are read here. Instances are read as
    Core rows; new instances, changed instances (only the columns that changed, one
    executemany per set of columns) and events are written as one executemany each, so a rule
    firing on 8,000 GPUs at once is not 16,000 round trips, and a steady one writes nothing
    (on Postgres one statement per table, :mod:`app.alerts.bulk_writes`). ``notify`` False:
    no notification route is active, the events are written as seen by the notifier.
    ``gone_hosts``: retired nodes (:mod:`app.fleet.retire`), whose alerts resolve at once,
    ``keep_firing_for`` or not."""
    session.flush()  # Core reads below do not autoflush pending ORM changes (acks, edits)
    observed = {fingerprint(spec.name, o.identity): o for o in observations}
    instances = dict(active)
    others = sorted(set(observed) - set(instances))
    if others:  # observed again after it resolved (or never active): read those too
        query = select(*read_columns(session)).where(
            _T.c.rule_id == rule_id, _fingerprint_in(session, others)
        )
        instances.update((i.fingerprint, i) for i in session.execute(query).all())
    timing = Timing(spec.for_s, spec.keep_firing_for_s)
    created: list[dict[str, Any]] = []
    updates: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    changes: list[tuple[str, dict[str, Any], str, str]] = []  # fp, row, from, to
    ids: dict[str, int] = {}
    for fp in sorted(set(observed) | set(instances)):
        obs, inst = observed.get(fp), instances.get(fp)
        if inst is not None and obs is not None and _unchanged(spec, obs, inst, mutes, now):
            continue
        held = timing
        if obs is None and inst is not None and gone_hosts:
            host = (inst[AT["labels"]] or {}).get("hostname")
            if host in gone_hosts:  # a retired node: no keep_firing_for
                held = Timing(spec.for_s, 0.0)
        new, transition = step(
            _state_of(inst), condition=condition_of(spec, obs), timing=held, now=now
        )
        if inst is None and (transition is None or obs is None):
            continue
        row = _row(spec, obs, inst, new, mutes, now)
        if inst is None:
            created.append({"rule_id": rule_id, "fingerprint": fp, **row})
        else:
            ids[fp] = inst.id
            value_at = row["value_at"]
            if transition is None:
                # A steady alert writes nothing but what changed: no per-tick timestamps
                # (last_active_at matters only for keep_firing_for), so thousands of firing
                # instances do not mean thousands of UPDATEs every evaluation.
                del row["last_evaluated_at"], row["value_at"]
                if timing.keep_firing_for_s <= 0:
                    del row["last_active_at"]
            changed = {k: v for k, v in row.items() if inst[AT[k]] != v}
            if transition is None and changed.keys() & {"value", "summary", "description"}:
                changed["value_at"] = value_at
            if changed:
                keys = tuple(sorted(changed))
                params = {f"v_{k}": v for k, v in changed.items()}
                updates.setdefault(keys, []).append({"k_id": inst.id, **params})
        if transition is not None:
            changes.append((fp, row, transition.from_state, transition.to_state))
    postgres = session.get_bind().dialect.name == "postgresql"
    if created and postgres:
        ids.update(bulk_writes.insert_instances(session, created))
    elif created:
        session.execute(insert(AlertInstance), created)
    for keys, batch in updates.items():
        if postgres:
            # One statement joining one array per column (the common steady change is an
            # absence's age or a window's new value; a mass transition thousands of states),
            # not one UPDATE per instance.
            bulk_writes.update_instances(session, keys, batch)
            continue
        stmt = (
            update(_T)
            .where(_T.c.id == bindparam("k_id"))
            .values({k: bindparam(f"v_{k}") for k in keys})
        )
        session.execute(stmt, batch)
    if not changes:
        return 0
    fresh = [fp for fp, *_ in changes if fp not in ids]
    if fresh:
        found = session.execute(
            select(_T.c.fingerprint, _T.c.id).where(
                _T.c.rule_id == rule_id, _fingerprint_in(session, fresh)
            )
        )
        ids.update((fp, instance_id) for fp, instance_id in found)
    events = [
        {
            "instance_id": ids[fp],
            "rule_id": rule_id,
            "at": now,
            "from_state": from_state,
            "to_state": to_state,
            "value": row["value"],
            "severity": spec.severity,
            "labels": row["labels"],
            "summary": row["summary"],
            "silenced": row["silenced"],
            "acked": row["acked"],
            # No route to tell: seen by the notifier as written (what it would mark them).
            **({} if notify else {"notified_at": utcnow()}),
        }
        for fp, row, from_state, to_state in changes
    ]
    if postgres:
        bulk_writes.insert_events(session, events)
    else:
        session.execute(insert(AlertEvent), events)
    if notify:
        notify_outbox.enqueue_events(session, rule_id=rule_id, at=now)  # same transaction
    return len(changes)


def _fingerprint_in(session: Session, fingerprints: list[str]) -> Any:
    """``fingerprint IN (…)``; on Postgres :func:`any_of` (a first evaluation asks for
    ~20,000)."""
    if session.get_bind().dialect.name == "postgresql":
        return any_of(_T.c.fingerprint, fingerprints, String)
    return _T.c.fingerprint.in_(fingerprints)


def _unchanged(spec: RuleSpec, obs: Observation, inst: Any, mutes: Mutes, now: datetime) -> bool:
    """Whether this evaluation leaves active instance ``inst`` as stored: its condition still
    holds (``obs`` met), no timer runs out (a pending one's ``for``; ``keep_firing_for``
    needs ``last_active_at`` written), its labels and silencing are those stored, and its
    value and texts are too or were written less than :data:`VALUE_REFRESH_S` ago. The steady
    path of most instances each tick, decided without building the state machine's objects
    and the row (~15 µs an instance, ~0.3 s a tick at 20,000 of them)."""
    state = inst[AT["state"]]
    if (
        not condition_of(spec, obs)
        or state not in ("pending", "firing")
        or spec.keep_firing_for_s > 0
    ):
        return False
    if state == "pending":
        since = inst[AT["active_since"]]
        if since is None or now - since >= timedelta(seconds=spec.for_s):
            return False
    labels = instance_labels(spec, obs)
    if labels != inst[AT["labels"]] or mutes.mute(labels) != inst[AT["silenced"]]:
        return False
    value_at = inst[AT["value_at"]]
    if value_at is not None and now - value_at < _VALUE_REFRESH:
        return True  # a new value or text waits for its refresh
    if obs.value != inst[AT["value"]]:
        return False
    summary, description = texts(spec, obs, labels)
    return summary == inst[AT["summary"]] and description == inst[AT["description"]]


def _row(
    spec: RuleSpec,
    obs: Observation | None,
    inst: Any,
    new: InstanceState,
    mutes: Mutes,
    now: datetime,
) -> dict[str, Any]:
    """The instance's columns after this evaluation (labels, value and texts from the
    observation when there is one, else as they were)."""
    if obs is not None:
        labels = instance_labels(spec, obs)
        summary, description = texts(spec, obs, labels)
        value = obs.value
    else:
        assert inst is not None
        labels, summary, description = inst.labels, inst.summary, inst.description
        value = inst.value
    active = new.state in ("pending", "firing")
    return {
        "labels": labels,
        "value": value,
        "summary": summary,
        "description": description,
        "state": new.state,
        "active_since": new.active_since,
        "last_active_at": new.last_active_at,
        "fired_at": new.fired_at,
        "resolved_at": new.resolved_at,
        "last_evaluated_at": now,
        "value_at": now,
        "silenced": active and mutes.mute(labels),
        "acked": active and inst is not None and inst.acked,
    }


def _state_of(inst: Any) -> InstanceState:
    if inst is None:
        return InstanceState()
    return InstanceState(
        inst.state,
        inst.active_since,
        inst.last_active_at,
        inst.fired_at,
        inst.resolved_at,
    )


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its repr when the message is empty (an empty
    message made the error handler itself fail)."""
    return (str(exc).splitlines() or [repr(exc)])[0]


def _each_guarded(
    session: Session,
    items: Sequence[Item],
    run: Callable[[Item], Result],
    report: EvaluationReport,
) -> list[Result]:
    """``run`` of every item, each failure logged and reported by rule name (the item's
    ``RuleSpec``) without stopping the others: first all in one savepoint; only when one
    fails, again one savepoint per item (a savepoint per rule and phase was ~270 round trips
    per wake-up). What a failed pass wrote is rolled back before the second."""
    try:
        with session.begin_nested():
            return [run(item) for item in items]
    except Exception as exc:
        # Logged (a failure the per-rule retry does not repeat would leave no trace otherwise).
        log.warning("an alert rule failed (%s); evaluating rule by rule", _first_line(exc))
    results = []
    for item in items:
        spec = next(part for part in item if isinstance(part, RuleSpec))
        try:
            with session.begin_nested():
                results.append(run(item))
        except Exception as exc:  # one bad rule must not stop the rest
            log.exception("alert rule %s failed", spec.name)
            report.failed[spec.name] = _first_line(exc)
    return results


@without_collection  # its collections were ~0.4 s of a 2-s evaluation at 1,000 nodes
def evaluate(
    session: Session,
    *,
    now: datetime,
    health_rules: HealthRules,
    read_session: Session | None = None,
    only: Callable[[RuleSpec], bool] | None = None,
    nodes: Collection[int] | None = None,
    recent_gpu: RecentGpuSamples | None = None,
    instances: ActiveInstanceCache | None = None,
) -> EvaluationReport:
    """Evaluate every enabled rule (with ``only``: those it accepts) at ``now``: first every
    rule's observations (reads only, in ``read_session`` when given), then the transitions in
    ``session``. On SQLite the scheduler passes a read-only session, so the write lock is held
    only while transitions are written, not while the fleet is queried; on Postgres one session
    does both.

    A rule whose stored spec no longer validates, or whose queries fail, is reported and
    skipped (its writes in a savepoint), never stopping the others. Rules left out by ``only``
    are not touched: their instances keep their state and timers.

    ``nodes``: a node-scoped evaluation (a wake-up for the nodes whose batches brought a
    change): only those nodes are read and observed, and only the instances of entities on
    them (label ``hostname``) are stepped; the others keep their state until the next
    evaluation of the whole fleet.

    ``recent_gpu`` and ``instances``: the scheduler's GPU samples and active instances kept
    between its ticks (:mod:`app.series.recent_gpu`, :mod:`app.alerts.instance_reads`); None
    reads them whole.
    """
    started = time.perf_counter()
    report = EvaluationReport()
    reader = read_session or session
    if reader.get_bind().dialect.name == "postgresql":
        # The window scans group ~0.5 M rows at 8,000 GPUs: in the default 4 MB they sort on
        # disk. For this transaction only.
        reader.execute(text(f"SET LOCAL work_mem = '{EVAL_WORK_MEM}'"))
    ctx = load_context(reader, now=now, health_rules=health_rules, node_ids=nodes)
    ctx.recent_gpu = recent_gpu
    lap = report.lap("context", started)
    rules = reader.execute(
        select(AlertRule.id, AlertRule.name, AlertRule.spec)
        .where(AlertRule.enabled)
        .order_by(AlertRule.id)
    ).all()
    specs: list[tuple[int, RuleSpec]] = []
    for rule_id, name, document in rules:
        try:
            spec = RuleSpec.model_validate(document)
        except ValueError as exc:
            log.error("alert rule %s no longer validates: %s", name, exc)
            report.failed[name] = _first_line(exc)
            continue
        if only is None or only(spec):
            specs.append((rule_id, spec))
    shared.plan(ctx, (spec for _, spec in specs))
    shared.read_ahead(ctx, EVAL_WORK_MEM)

    def observe_one(item: tuple[int, RuleSpec]) -> tuple[int, RuleSpec, list[Observation]]:
        rule_id, spec = item
        found = observe(ctx, spec)
        if spec.condition.kind != "health" and wants_action(spec):
            found = with_actions(ctx, spec, found)
        return rule_id, spec, found

    # Rules whose aggregates are read ahead go last, so the reads run while the others are
    # observed; the transitions are then applied in rule order again.
    ordered = sorted(specs, key=lambda item: shared.waits_for_read_ahead(ctx, item[1]))
    try:
        # A failed query must not abort the others' snapshot: isolated in savepoints.
        observed = _each_guarded(reader, ordered, observe_one, report)
    finally:
        shared.finish(ctx)
    observed.sort(key=lambda item: item[0])
    lap = report.lap("observe", lap)
    if recent_gpu is not None and not ctx.cache.get("recent_gpu_used"):
        recent_gpu.release(session)
    if read_session is not None:
        read_session.rollback()  # end the read snapshot before writing
    mutes = Mutes(
        active_silences(session, now=now),
        frozenset(maintenance.hosts_in_maintenance(session, now=now)),
    )
    session.flush()
    hosts = None if nodes is None else sorted(node.hostname for node in ctx.nodes.values())
    rule_ids = [rule_id for rule_id, _, _ in observed]
    if instances is not None and hosts is None:
        active = instances.get(session, rule_ids)
    else:
        active = active_instances(session, rule_ids, hostnames=hosts)
    notify = bool(notify_outbox.active_routes(session))
    gone = retire.retired_hostnames(session) if nodes is None else frozenset()
    if session.get_bind().dialect.name == "postgresql":
        # Each event row's foreign-key check is a cached query on alert_instance; its generic
        # plan, made while the table was small, scanned the table for each row once thousands
        # of instances were created in this transaction (22.8 s instead of 0.9 s for the
        # ~30,000 events of a first evaluation at 1,000 nodes). Planned for each row instead.
        session.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))
    lap = report.lap("instances", lap)

    def apply_one(item: tuple[int, RuleSpec, list[Observation]]) -> int:
        rule_id, spec, observations = item
        return apply_rule(
            session,
            rule_id=rule_id,
            spec=spec,
            observations=observations,
            mutes=mutes,
            now=now,
            active=active[rule_id],
            notify=notify,
            gone_hosts=gone,
        )

    for changed in _each_guarded(session, observed, apply_one, report):
        report.transitions += changed
        report.rules += 1
    report.lap("apply", lap)
    report.duration_s = time.perf_counter() - started
    return report

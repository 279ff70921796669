"""The health checks: each reads one kind of telemetry of a node (from its view, or from the
:class:`~app.health.evidence.Evidence` loaded fleet-wide) and returns the reasons it finds,
keyed by GPU id (``None`` for the node itself). Thresholds come from the rules. No check
queries the database."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from app.alerts.template_values import duration
from app.fleet.service import GpuView, NodeView, never_listed
from app.health import actions, reasons
from app.health.evidence import Evidence
from app.health.rules import (
    LOST_EVENT_KINDS,
    LOST_GPU_STATES,
    MIN_THROTTLE_SAMPLES,
    HealthRules,
    State,
    xid_text,
)
from app.health.schemas import ReasonOut
from app.series.writes import natural_key

Found = dict[int | None, list[ReasonOut]]

#: The metrics of each GPU's newest sample that :func:`latest_values` reads.
LATEST_METRICS_READ = (
    reasons.REMAPPED_ROWS_PENDING,
    reasons.REMAPPED_ROWS_FAILURE,
    "pcie_link_gen",
    "pcie_link_gen_max",
    "pcie_link_width",
    "pcie_link_width_max",
)


def _reason(
    view: NodeView,
    anchor: str,
    state: State,
    code: str,
    text: str,
    *,
    since: datetime | None = None,
) -> ReasonOut:
    """A reason whose evidence is the ``anchor`` section of the node page."""
    return ReasonOut(
        state=state,
        code=code,
        text=text,
        since=since,
        evidence=f"/nodes/{view.node.hostname}#{anchor}",
    )


def inventory(
    view: NodeView, *, events_first_lost: dict[int, datetime], unresponsive_after_s: float
) -> Found:
    """Lost GPUs (``gpu.state`` or a lost event), GPUs missing from the latest inventory, and
    GPUs in it whose newest sample is more than ``unresponsive_after_s`` older than the node's
    newest sample or newest batch (:func:`unresponsive`, :func:`reported_until`)."""
    found: Found = defaultdict(list)
    newest = reported_until(view)
    for g in view.gpus:
        gpu = g.gpu
        if gpu.state in LOST_GPU_STATES or gpu.id in events_first_lost:
            why = gpu.state_reason or ("reported lost" if gpu.state == "ok" else gpu.state)
            text = f"GPU {gpu.index} lost / fallen off the bus ({why})"
            since = events_first_lost.get(gpu.id)
            found[gpu.id].append(
                _reason(view, "gpus-heading", State.UNHEALTHY, reasons.GPU_LOST, text, since=since)
            )
        elif gpu.state == "missing":
            text = f"GPU {gpu.index} is missing from the node's latest inventory"
            found[gpu.id].append(
                _reason(
                    view,
                    "gpus-heading",
                    State.UNHEALTHY,
                    reasons.GPU_MISSING,
                    text,
                    since=gpu.last_seen_at,
                )
            )
        elif newest is not None and (silent := unresponsive(g, newest, unresponsive_after_s)):
            found[gpu.id].append(
                _reason(
                    view,
                    "gpus-heading",
                    State.UNHEALTHY,
                    reasons.GPU_UNRESPONSIVE,
                    silent,
                    since=gpu.last_sample_at,
                )
            )
    if (absent := never_enumerated(view)) > 0:
        expected = view.node.expected_gpu_count
        text = (
            f"{absent} of the node's {expected} GPUs never entered its inventory: the driver "
            f"does not enumerate {'them' if absent > 1 else 'it'} (lost before the agent "
            "started, or in an unknown error state)"
        )
        found[None].append(
            _reason(
                view,
                "gpus-heading",
                State.UNHEALTHY,
                reasons.GPU_MISSING,
                text,
            )
        )
    return found


def never_enumerated(view: NodeView) -> int:
    """How many of the GPUs the node should have have no row at all
    (:func:`app.fleet.service.never_listed`)."""
    return never_listed(view.node.expected_gpu_count, len(view.gpus))


def reported_until(view: NodeView) -> datetime | None:
    """The newest time the node's agent reported for, on the agent's clock: its newest sample;
    or, when its newest batch says GPU reads failed (``collection_errors``: a hung NVML call,
    nvidia-smi timing out), that batch's send time if later (the server's receive time plus the
    measured clock skew) — batches that keep coming without samples (every GPU hung, a
    one-GPU node's) leave the samples behind. None before any sample."""
    node = view.node
    newest = node.last_sample_at
    if newest is None or not node.collection_errors or node.last_seen_at is None:
        return newest
    sent = node.last_seen_at + timedelta(seconds=node.clock_skew_s or 0.0)
    return max(newest, sent)


def unresponsive(g: GpuView, node_newest: datetime, after_s: float) -> str | None:
    """Why GPU ``g`` counts as unresponsive, or None: it is in the node's inventory, but its
    newest sample is more than ``after_s`` older than the node's newest sample
    ``node_newest``, or it has none while the node has (enumerated but unreadable) — the agent
    reports the other GPUs and gets nothing from this one (a hung NVML call: its collection
    errors say which). Its last values are not current."""
    gpu = g.gpu
    if gpu.last_sample_at is None:
        return (
            f"GPU {gpu.index} is listed but has sent no sample while the node reports "
            "(enumerated but unreadable: see the node's collection errors)"
        )
    gap_s = (node_newest - gpu.last_sample_at).total_seconds()
    if gap_s <= after_s:
        return None
    return (
        f"GPU {gpu.index} has sent no sample for {duration(gap_s)} while the node reports "
        "(an NVML call on it hangs or fails: see the node's collection errors)"
    )


def events(
    view: NodeView, rules: HealthRules, evidence: Evidence
) -> tuple[Found, dict[int, datetime]]:
    """Xid events within the event window, one reason per (GPU, Xid); lost-GPU events are
    returned as the first time each GPU was reported lost (node-level ones as reasons)."""
    found: Found = defaultdict(list)
    first_lost: dict[int, datetime] = {}
    xids: dict[tuple[int | None, int, bool], list[datetime]] = defaultdict(list)
    for event in evidence.events.get(view.node.id, ()):
        if event.kind in LOST_EVENT_KINDS:
            if event.test:
                continue  # the self-test injects Xids (a test Xid 79 is the lost GPU)
            if event.gpu_id is not None:
                first_lost.setdefault(event.gpu_id, event.occurred_at)
            elif not found[None]:
                text = f"a GPU was reported lost ({event.pci_bus_id or 'unknown PCI address'})"
                found[None].append(
                    _reason(
                        view,
                        "events-heading",
                        State.UNHEALTHY,
                        reasons.GPU_LOST,
                        text,
                        since=event.occurred_at,
                    )
                )
        elif event.xid is not None:
            xids[(event.gpu_id, event.xid, bool(event.test))].append(event.occurred_at)
    hours = rules.event_window_s / 3600
    tested = duration(rules.self_test_window_s)
    for (gpu_id, xid, test), times in sorted(xids.items(), key=lambda kv: kv[1][0]):
        bursts = actions.bursts(times, rules.burst_quiet_s, rules.burst_max_s)
        state = rules.xid_state(xid, bursts=bursts)
        if state is None:
            continue
        meaning = xid_text(xid) or "not in the health table"
        if test:
            text = (
                f"TEST: Xid {xid} ({meaning}) ×{len(times)}, a self-test fault (counted "
                f"for {tested})"
            )
        else:
            text = f"Xid {xid} ({meaning}) ×{len(times)} in the last {hours:g} h"
            if xid in rules.xid_watched and xid not in rules.xid_degraded | rules.xid_unhealthy:
                text += f", in {bursts} separate bursts"
        reason = _reason(view, "events-heading", state, reasons.xid_code(xid), text, since=times[0])
        reason.test = test
        found[gpu_id].append(reason)
    return found, first_lost


def latest_values(view: NodeView) -> Found:
    """From each GPU's newest sample: remapped rows pending or failed, a PCIe link narrower than
    its maximum."""
    found: Found = defaultdict(list)
    for g in view.gpus:
        s, at = g.latest, g.latest_at
        if s.get("remapped_rows_failure"):
            text = "row remapping failed (nvmlDeviceGetRemappedRows)"
            found[g.gpu.id].append(
                _reason(view, "gpus-heading", State.UNHEALTHY, reasons.REMAPPED_ROWS_FAILURE, text)
            )
        if s.get("remapped_rows_pending"):
            text = "remapped rows pending: reset the GPU to apply them"
            found[g.gpu.id].append(
                _reason(
                    view,
                    "gpus-heading",
                    State.DEGRADED,
                    reasons.REMAPPED_ROWS_PENDING,
                    text,
                    since=at,
                )
            )
        width, widest = s.get("pcie_link_width"), s.get("pcie_link_width_max")
        # Width only, as the default alert rule judges it: an idle GPU lowers its PCIe
        # generation on purpose (power saving), a lane lost is a riser, cable or seating.
        if width is not None and widest is not None and width < widest:
            text = f"PCIe link width x{width} of x{widest}"
            if s.get("pcie_link_gen") is not None and s.get("pcie_link_gen_max") is not None:
                text += f" (gen {s['pcie_link_gen']} of {s['pcie_link_gen_max']})"
            found[g.gpu.id].append(
                _reason(
                    view, "gpus-heading", State.DEGRADED, reasons.PCIE_DOWNTRAINED, text, since=at
                )
            )
    return found


def throttling(view: NodeView, rules: HealthRules, evidence: Evidence) -> Found:
    """Thermal or power throttling in at least ``throttle_min_fraction`` of each GPU's samples
    over the throttle window (ending at the node's newest sample)."""
    found: Found = defaultdict(list)
    minutes = rules.throttle_window_s / 60
    for g in view.gpus:
        counts = evidence.throttle.get(g.gpu.id)
        if counts is None or counts.samples < MIN_THROTTLE_SAMPLES:
            continue
        for code, hits, since, what in (
            (reasons.THERMAL_THROTTLE, counts.thermal, counts.thermal_since, "thermal"),
            (reasons.POWER_THROTTLE, counts.power, counts.power_since, "power"),
        ):
            share = hits / counts.samples
            if share >= rules.throttle_min_fraction:
                text = f"{what} throttling in {share:.0%} of samples over {minutes:g} min"
                found[g.gpu.id].append(
                    _reason(view, "gpus-heading", State.DEGRADED, code, text, since=since)
                )
    return found


def links(view: NodeView, evidence: Evidence) -> Found:
    """NVLinks whose newest reading is ``down``, and NVLinks of a readable GPU that stopped
    reporting while its other links go on (within the event window)."""
    found: Found = defaultdict(list)
    for g in view.gpus:
        down = evidence.links_down.get(g.gpu.id, [])
        silent = [] if g.gpu.state != "ok" else evidence.links_gone.get(g.gpu.id, [])
        parts = []
        if down:
            numbers = ", ".join(str(link.link) for link in down)
            parts.append(f"NVLink down: link{'s' if len(down) > 1 else ''} {numbers}")
        if silent:
            numbers = ", ".join(str(link.link) for link in sorted(silent, key=lambda r: r.link))
            plural = "s" if len(silent) > 1 else ""
            parts.append(f"NVLink{plural} {numbers} stopped reporting (the GPU's others report)")
        if not parts:
            continue
        since = min(link.sampled_at for link in [*down, *silent])
        found[g.gpu.id].append(
            _reason(
                view,
                "nvlinks-heading",
                State.UNHEALTHY,
                reasons.NVLINK_DOWN,
                "; ".join(parts),
                since=since,
            )
        )
    return found


def ports(view: NodeView, rules: HealthRules, evidence: Evidence) -> Found:
    """InfiniBand/RoCE ports that stopped reporting while the node's others go on, ports not
    ACTIVE now that were ACTIVE earlier in the event window, and ACTIVE ports whose link went
    down repeatedly within the flap window (flapping)."""
    found: Found = defaultdict(list)
    down = sorted(
        evidence.ports_down.get(view.node.id, ()), key=lambda p: (natural_key(p.device), p.port)
    )
    for port in sorted(
        evidence.ports_gone.get(view.node.id, ()), key=lambda p: (natural_key(p.device), p.port)
    ):
        text = (
            f"{port.device} port {port.port} stopped reporting (last read "
            f"{port.state or 'without a state'}): the adapter or its driver is gone"
        )
        found[None].append(
            _reason(
                view,
                "nics-heading",
                State.UNHEALTHY,
                reasons.IB_PORT_DOWN,
                text,
                since=port.sampled_at,
            )
        )
    for port in down:
        text = f"{port.device} port {port.port} is {port.state or 'not reported'} (was ACTIVE)"
        found[None].append(
            _reason(
                view, "nics-heading", State.UNHEALTHY, reasons.IB_PORT_DOWN, text, since=port.since
            )
        )
    flapping = sorted(
        evidence.ports_flapping.get(view.node.id, ()),
        key=lambda p: (natural_key(p.device), p.port),
    )
    within = duration(rules.ib_flap_window_s)
    for port in flapping:
        text = (
            f"{port.device} port {port.port} is flapping: its link went down {int(port.downs)} "
            f"times within {within} (link_downed_count)"
        )
        found[None].append(
            _reason(view, "nics-heading", State.DEGRADED, reasons.IB_PORT_FLAPPING, text)
        )
    return found


def storage(view: NodeView, rules: HealthRules, evidence: Evidence) -> Found:
    """Disks whose newest average wait, or NFS mounts whose newest RTT, is above threshold."""
    found: Found = defaultdict(list)
    disks = sorted(evidence.slow_disks.get(view.node.id, ()), key=lambda d: natural_key(d.device))
    slow = [(f"{d.device} wait {d.avg_wait_s * 1000:.0f} ms", d.sampled_at) for d in disks] + [
        (f"NFS {m.mountpoint} RTT {m.avg_rtt_s * 1000:.0f} ms", m.sampled_at)
        for m in sorted(evidence.slow_nfs.get(view.node.id, ()), key=lambda m: m.mountpoint)
    ]
    if slow:
        text = "storage latency high: " + "; ".join(what for what, _ in slow)
        found[None].append(
            _reason(
                view,
                "storage-heading",
                State.DEGRADED,
                reasons.STORAGE_LATENCY_HIGH,
                text,
                since=min(at for _, at in slow),
            )
        )
    return found


def clock(view: NodeView, rules: HealthRules) -> Found:
    """The node's clock further than ``rules.future_tolerance_s`` off the server's, as its
    latest batch measured it (``clock_skew_s``: ``sent_at`` minus the receive time). Ahead,
    ingest refuses its readings as ``sampled_at_in_future``, so its GPUs' health cannot be
    known from them; behind, they are stored at the wrong times. Unknown, as a stale node."""
    found: Found = defaultdict(list)
    skew = view.node.clock_skew_s
    if skew is None or abs(skew) <= rules.future_tolerance_s:
        return found
    if skew > 0:
        text = (
            f"the node's clock is {duration(skew)} ahead of the server's (more than "
            f"{duration(rules.future_tolerance_s)}): its readings are refused as dated in the "
            "future, so its GPUs' state is not known"
        )
    else:
        text = (
            f"the node's clock is {duration(-skew)} behind the server's (more than "
            f"{duration(rules.future_tolerance_s)}): its readings are stored at the wrong times"
        )
    found[None].append(_reason(view, "node-live", State.UNKNOWN, reasons.CLOCK_SKEW, text))
    return found

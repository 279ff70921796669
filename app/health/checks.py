"""The health checks: each reads one kind of stored telemetry of a node and returns the reasons
it finds, keyed by GPU id (``None`` for the node itself). Thresholds come from the rules."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from app.events.models import NodeEvent
from app.fleet.service import NodeView
from app.health.rules import (
    LOST_EVENT_KINDS,
    LOST_GPU_STATES,
    MIN_THROTTLE_SAMPLES,
    POWER_BITS,
    THERMAL_BITS,
    HealthRules,
    State,
    xid_text,
)
from app.health.schemas import ReasonOut
from app.metrics.models import gpu_sample
from app.nics import service as nic_service
from app.nics.models import NicPortSample
from app.nvlinks import service as nvlink_service
from app.storage import service as storage_service

Found = dict[int | None, list[ReasonOut]]


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


def inventory(view: NodeView, *, events_first_lost: dict[int, datetime]) -> Found:
    """Lost GPUs (``gpu.state`` or a lost event) and GPUs missing from the latest inventory."""
    found: Found = defaultdict(list)
    for g in view.gpus:
        gpu = g.gpu
        if gpu.state in LOST_GPU_STATES or gpu.id in events_first_lost:
            why = gpu.state_reason or ("reported lost" if gpu.state == "ok" else gpu.state)
            text = f"GPU {gpu.index} lost / fallen off the bus ({why})"
            since = events_first_lost.get(gpu.id)
            found[gpu.id].append(
                _reason(view, "gpus-heading", State.UNHEALTHY, "gpu_lost", text, since=since)
            )
        elif gpu.state == "missing":
            text = f"GPU {gpu.index} is missing from the node's latest inventory"
            found[gpu.id].append(
                _reason(
                    view,
                    "gpus-heading",
                    State.UNHEALTHY,
                    "gpu_missing",
                    text,
                    since=gpu.last_seen_at,
                )
            )
    return found


def events(
    session: Session, view: NodeView, rules: HealthRules, *, now: datetime
) -> tuple[Found, dict[int, datetime]]:
    """Xid events within the event window, one reason per (GPU, Xid); lost-GPU events are
    returned as the first time each GPU was reported lost (node-level ones as reasons)."""
    since = now - timedelta(seconds=rules.event_window_s)
    rows = session.scalars(
        select(NodeEvent)
        .where(
            NodeEvent.node_id == view.node.id,
            NodeEvent.occurred_at >= since,
            or_(NodeEvent.kind == "xid", NodeEvent.kind.in_(LOST_EVENT_KINDS)),
        )
        .order_by(NodeEvent.occurred_at)
    )
    found: Found = defaultdict(list)
    first_lost: dict[int, datetime] = {}
    xids: dict[tuple[int | None, int], list[datetime]] = defaultdict(list)
    for event in rows:
        if event.kind in LOST_EVENT_KINDS:
            if event.gpu_id is not None:
                first_lost.setdefault(event.gpu_id, event.occurred_at)
            elif not found[None]:
                text = f"a GPU was reported lost ({event.pci_bus_id or 'unknown PCI address'})"
                found[None].append(
                    _reason(
                        view,
                        "events-heading",
                        State.UNHEALTHY,
                        "gpu_lost",
                        text,
                        since=event.occurred_at,
                    )
                )
        elif event.xid is not None:
            xids[(event.gpu_id, event.xid)].append(event.occurred_at)
    hours = rules.event_window_s / 3600
    for (gpu_id, xid), times in sorted(xids.items(), key=lambda kv: kv[1][0]):
        state = rules.xid_state(xid)
        if state is None:
            continue
        meaning = xid_text(xid) or "not in the health table"
        text = f"Xid {xid} ({meaning}) ×{len(times)} in the last {hours:g} h"
        found[gpu_id].append(
            _reason(view, "events-heading", state, f"xid_{xid}", text, since=times[0])
        )
    return found, first_lost


def latest_values(view: NodeView) -> Found:
    """From each GPU's newest sample: remapped rows pending or failed, PCIe link downtrained."""
    found: Found = defaultdict(list)
    for g in view.gpus:
        s, at = g.latest, g.latest_at
        if s.get("remapped_rows_failure"):
            text = "row remapping failed (nvmlDeviceGetRemappedRows)"
            found[g.gpu.id].append(
                _reason(view, "gpus-heading", State.UNHEALTHY, "remapped_rows_failure", text)
            )
        if s.get("remapped_rows_pending"):
            text = "remapped rows pending: reset the GPU to apply them"
            found[g.gpu.id].append(
                _reason(
                    view, "gpus-heading", State.DEGRADED, "remapped_rows_pending", text, since=at
                )
            )
        low = [
            f"{label} {s[cur]} of {s[top]}"
            for label, cur, top in (
                ("gen", "pcie_link_gen", "pcie_link_gen_max"),
                ("width x", "pcie_link_width", "pcie_link_width_max"),
            )
            if s.get(cur) is not None and s.get(top) is not None and s[cur] < s[top]
        ]
        if low:
            text = "PCIe link below its maximum: " + ", ".join(low).replace("x ", "x")
            found[g.gpu.id].append(
                _reason(view, "gpus-heading", State.DEGRADED, "pcie_downtrained", text, since=at)
            )
    return found


def throttling(session: Session, view: NodeView, rules: HealthRules) -> Found:
    """Thermal or power throttling in at least ``throttle_min_fraction`` of each GPU's samples
    over the throttle window (ending at the node's newest sample)."""
    found: Found = defaultdict(list)
    ids = [g.gpu.id for g in view.gpus]
    if not ids or view.node.last_sample_at is None:
        return found
    start = view.node.last_sample_at - timedelta(seconds=rules.throttle_window_s)
    rows = session.execute(
        select(gpu_sample.c.gpu_id, gpu_sample.c.sampled_at, gpu_sample.c.clocks_event_reasons)
        .where(
            gpu_sample.c.gpu_id.in_(ids),
            gpu_sample.c.sampled_at >= start,
            gpu_sample.c.clocks_event_reasons.is_not(None),
        )
        .order_by(gpu_sample.c.sampled_at)
    )
    per_gpu: dict[int, list[tuple[datetime, int]]] = defaultdict(list)
    for gpu_id, at, bits in rows:
        per_gpu[gpu_id].append((at, int(bits)))
    minutes = rules.throttle_window_s / 60
    for gpu_id, samples in per_gpu.items():
        if len(samples) < MIN_THROTTLE_SAMPLES:
            continue
        for code, mask, what in (
            ("thermal_throttle", THERMAL_BITS, "thermal"),
            ("power_throttle", POWER_BITS, "power"),
        ):
            hit = [at for at, bits in samples if bits & mask]
            share = len(hit) / len(samples)
            if share >= rules.throttle_min_fraction:
                text = f"{what} throttling in {share:.0%} of samples over {minutes:g} min"
                found[gpu_id].append(
                    _reason(view, "gpus-heading", State.DEGRADED, code, text, since=hit[0])
                )
    return found


def links(session: Session, view: NodeView) -> Found:
    """NVLinks whose newest reading is ``down``."""
    found: Found = defaultdict(list)
    gpus = [g.gpu for g in view.gpus]
    down: dict[int, list[Any]] = defaultdict(list)
    for link in nvlink_service.list_latest_links(session, gpus=gpus):
        if link.state == "down":
            down[link.gpu_id].append(link)
    for gpu_id, gone in down.items():
        numbers = ", ".join(str(link.link) for link in gone)
        text = f"NVLink down: link{'s' if len(gone) > 1 else ''} {numbers}"
        since = min(link.sampled_at for link in gone)
        found[gpu_id].append(
            _reason(view, "nvlinks-heading", State.UNHEALTHY, "nvlink_down", text, since=since)
        )
    return found


def ports(session: Session, view: NodeView, rules: HealthRules) -> Found:
    """InfiniBand/RoCE ports not ACTIVE now that were ACTIVE earlier in the event window."""
    found: Found = defaultdict(list)
    for port in nic_service.list_latest_ports(session, node_id=view.node.id):
        if nic_service.is_active(port):
            continue
        same = (
            NicPortSample.node_id == view.node.id,
            NicPortSample.device == port.device,
            NicPortSample.port == port.port,
        )
        window_start = port.sampled_at - timedelta(seconds=rules.event_window_s)
        last_up = session.scalar(
            select(func.max(NicPortSample.sampled_at)).where(
                *same,
                NicPortSample.sampled_at >= window_start,
                func.upper(NicPortSample.state) == "ACTIVE",
            )
        )
        if last_up is None:
            continue
        since = session.scalar(
            select(func.min(NicPortSample.sampled_at)).where(
                *same, NicPortSample.sampled_at > last_up
            )
        )
        text = f"{port.device} port {port.port} is {port.state or 'not reported'} (was ACTIVE)"
        found[None].append(
            _reason(view, "nics-heading", State.UNHEALTHY, "ib_port_down", text, since=since)
        )
    return found


def storage(session: Session, view: NodeView, rules: HealthRules) -> Found:
    """Disks whose newest average wait, or NFS mounts whose newest RTT, is above threshold."""
    found: Found = defaultdict(list)
    current = storage_service.get_node_storage(session, node_id=view.node.id)
    slow = [
        (f"{d.device} wait {d.avg_wait_s * 1000:.0f} ms", d.sampled_at)
        for d in current.disks
        if d.avg_wait_s is not None and d.avg_wait_s > rules.disk_wait_s
    ] + [
        (f"NFS {m.mountpoint} RTT {m.avg_rtt_s * 1000:.0f} ms", m.sampled_at)
        for m in current.nfs_mounts
        if m.avg_rtt_s is not None and m.avg_rtt_s > rules.nfs_rtt_s
    ]
    if slow:
        text = "storage latency high: " + "; ".join(what for what, _ in slow)
        found[None].append(
            _reason(
                view,
                "storage-heading",
                State.DEGRADED,
                "storage_latency_high",
                text,
                since=min(at for _, at in slow),
            )
        )
    return found

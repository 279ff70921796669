"""Many simulated agents in one process, one thread each, for demos and end-to-end tests.

Command line (``python -m agents.simfleet --help``)::

    python -m agents.simfleet --server http://127.0.0.1:8000 --fleet-file fleet.json \\
        --interval 1 --batch-interval 5 --random-faults --fault gpu-a-001:gpu_lost@30:3

From Python::

    with SimFleet(nodes, server_url=url, spool_root=tmp_path, interval_s=0.2) as fleet:
        fleet.inject("gpu-a-001", "xid", gpu_index=0, xid=48)
        ...
    fleet.agents["gpu-a-001"].samples_acked
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from agents.agent import Agent, AgentConfig
from agents.fleetspec import FleetNode, ScheduledFault, load_fleet_file, parse_fault
from agents.simulated import faults as sim_faults
from agents.simulated.collector import SimulatedCollector, seed_from_hostname
from agents.simulated.host import SimulatedHostSource

log = logging.getLogger("agents.simfleet")

RANDOM_FAULT_GAP_S = (120.0, 300.0)
#: When the first random fault comes (seconds after start): within the first minute, once every
#: node has reported, so someone trying the demo sees a fault, its alert and its page at once.
FIRST_RANDOM_FAULT_S = (20.0, 45.0)
#: Sampling rounds per host reading sent (60 s ÷ 5 s, the agent at ``--interval 5``).
HOST_ROUNDS = 12
COUNTERS = (
    "samples_generated",
    "samples_acked",
    "events_generated",
    "batches_spooled",
    "batches_sent",
    "batches_dropped",
    "push_failures",
    "push_refusals",
)


class SimFleet:
    """Simulated agents for ``nodes``, pushing to ``server_url`` (one thread per agent plus one
    for faults). Spools live in ``spool_root/<hostname>``.

    ``faults`` are injected at their offset from :meth:`start`; ``random_faults`` adds a random
    fault on a random node every 2-5 minutes. Host readings are sent every
    :data:`HOST_ROUNDS` samples (at most 60 s). ``agent_options`` override :class:`AgentConfig`
    fields (e.g. ``{"backoff_cap_s": 5}``); ``seed`` reseeds every simulator (default: from
    hostnames, so a fleet behaves the same on every run).

    Raises:
        ValueError: two nodes with the same hostname, or a fault naming an unknown host.
    """

    def __init__(
        self,
        nodes: Sequence[FleetNode],
        *,
        server_url: str,
        spool_root: Path | str,
        interval_s: float = 1.0,
        batch_interval_s: float = 5.0,
        faults: Iterable[ScheduledFault] = (),
        random_faults: bool = False,
        seed: int | None = None,
        agent_options: dict[str, Any] | None = None,
    ) -> None:
        hostnames = [n.hostname for n in nodes]
        if len(set(hostnames)) != len(hostnames):
            raise ValueError("duplicate hostname in fleet")
        self.faults = sorted(faults, key=lambda f: f.at_s)
        for fault in self.faults:
            if fault.hostname not in hostnames:
                raise ValueError(f"fault for unknown host {fault.hostname!r}")
        self.random_faults = random_faults
        self.rng = random.Random(seed)
        self.collectors: dict[str, SimulatedCollector] = {}
        self.host_sources: dict[str, SimulatedHostSource] = {}
        self.agents: dict[str, Agent] = {}
        base = AgentConfig(
            hostname="-",
            spool_dir=Path(spool_root),
            server_url=server_url,
            interval_s=interval_s,
            batch_interval_s=batch_interval_s,
            shutdown_timeout_s=3.0,
            # The agent's ratio at --interval 5 (host readings every 60 s), so a fleet sampled
            # faster for a demo or a test shows host changes as much sooner.
            host_interval_s=min(60.0, HOST_ROUNDS * interval_s),
        )
        base = replace(base, **(agent_options or {}))
        for node in nodes:
            node_seed = None if seed is None else seed_from_hostname(f"{seed}/{node.hostname}")
            collector = SimulatedCollector(node.hostname, node.gpu_count, seed=node_seed)
            config = replace(
                base,
                hostname=node.hostname,
                token=node.token,
                labels=dict(node.labels),
                spool_dir=Path(spool_root) / node.hostname,
            )
            host = SimulatedHostSource(collector, seed=None if node_seed is None else node_seed + 1)
            self.collectors[node.hostname] = collector
            self.host_sources[node.hostname] = host
            self.agents[node.hostname] = Agent(config, collector, host_sources=[host])
        for fault in self.faults:
            self._check_index(fault)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _check_index(self, fault: ScheduledFault) -> None:
        """Refuse at start a scheduled fault naming a GPU or port its node does not have (not
        at injection time, minutes later, as a log line)."""
        if fault.gpu_index is None or fault.kind in ("storage_slow", "agent_stop"):
            return
        if fault.kind in sim_faults.HOST_FAULT_KINDS:
            count, what = len(self.host_sources[fault.hostname].ports), "port"
        else:
            count, what = len(self.collectors[fault.hostname].gpus), "GPU"
        if not 0 <= fault.gpu_index < count:
            raise ValueError(
                f"fault {fault.hostname}:{fault.kind}: {what} index {fault.gpu_index} out of "
                f"range 0..{count - 1}"
            )

    def __enter__(self) -> SimFleet:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start every agent's thread and the fault thread. Faults scheduled at 0 s are in
        force before the agents' first round (``lost_at_start``: a GPU the first report lacks)."""
        for fault in [f for f in self.faults if f.at_s <= 0]:
            self._inject_kind(fault.hostname, fault.kind, fault.gpu_index, fault.xid)
        self.faults = [f for f in self.faults if f.at_s > 0]
        for hostname, agent in self.agents.items():
            thread = threading.Thread(
                target=agent.run, args=(self._stop,), name=f"agent-{hostname}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        faults = threading.Thread(target=self._fault_loop, name="simfleet-faults", daemon=True)
        faults.start()
        self._threads.append(faults)

    def stop(self, timeout_s: float = 8.0) -> None:
        """Stop every agent (each spools its partial batch and tries a last push) and wait for
        their threads, at most ``timeout_s`` in all."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def inject(
        self,
        hostname: str,
        kind: str,
        gpu_index: int | None = None,
        duration_s: float | None = None,
        xid: int | None = None,
    ) -> None:
        """Inject a fault into ``hostname``'s simulator: GPU faults into its collector (see
        ``SimulatedCollector.inject``), ``ib_port_down``, ``ib_flap`` and ``storage_slow`` into
        its host source (see ``SimulatedHostSource.inject``; ``gpu_index`` is then the port).

        Raises:
            KeyError: no such host.
            ValueError: unknown kind, GPU or port index, or a fault the node cannot have
                (``nvlink_down`` without NVLink).
        """
        span = "default" if duration_s is None else f"{duration_s:.0f} s"
        log.info("fault: %s %s gpu=%s xid=%s duration=%s", hostname, kind, gpu_index, xid, span)
        if kind in sim_faults.HOST_FAULT_KINDS:
            self.host_sources[hostname].inject(kind, index=gpu_index, duration_s=duration_s)
            return
        self.collectors[hostname].inject(kind, gpu_index=gpu_index, duration_s=duration_s, xid=xid)

    def totals(self) -> dict[str, int]:
        """Return each agent counter summed over the fleet."""
        return {name: sum(getattr(a, name) for a in self.agents.values()) for name in COUNTERS}

    def _fault_loop(self) -> None:
        started = time.monotonic()
        pending = list(self.faults)
        next_random = started + self.rng.uniform(*FIRST_RANDOM_FAULT_S)
        while not self._stop.is_set():
            now = time.monotonic()
            while pending and started + pending[0].at_s <= now:
                fault = pending.pop(0)
                self._inject_kind(fault.hostname, fault.kind, fault.gpu_index, fault.xid)
            if self.random_faults and next_random <= now and self.agents:
                self._random_fault()
                next_random = now + self.rng.uniform(*RANDOM_FAULT_GAP_S)
            wake = [next_random] if self.random_faults else []
            if pending:
                wake.append(started + pending[0].at_s)
            self._stop.wait(min(1.0, max(0.0, min(wake, default=now + 1.0) - now)))

    def _random_fault(self) -> None:
        hostname = self.rng.choice(sorted(self.agents))
        has_nvlink = bool(self.collectors[hostname].shape.nvlinks_per_gpu)
        kind = sim_faults.random_fault_kind(self.rng, has_nvlink=has_nvlink)
        xid = self.rng.choice(sim_faults.RANDOM_XIDS) if kind == "xid" else None
        self._inject_kind(hostname, kind, None, xid)

    def _inject_kind(
        self, hostname: str, kind: str, gpu_index: int | None, xid: int | None
    ) -> None:
        span = sim_faults.FAULT_SPANS_S[kind]
        try:
            self.inject(hostname, kind, gpu_index, self.rng.uniform(*span), xid)
        except (KeyError, ValueError) as exc:
            log.error("fault on %s not injected: %s", hostname, exc)


def build_parser() -> argparse.ArgumentParser:
    """Return the ``python -m agents.simfleet`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m agents.simfleet",
        description="Run many simulated Fleetwatch agents in one process.",
    )
    parser.add_argument("--server", required=True, help="server base URL, e.g. http://host:8000")
    parser.add_argument("--fleet-file", required=True, type=Path, help="fleet JSON file")
    parser.add_argument("--interval", type=_positive, default=1.0, help="sampling period, s")
    parser.add_argument("--batch-interval", type=_positive, default=5.0, help="batch period, s")
    parser.add_argument(
        "--spool-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "fleetwatch-simfleet",
        help="spool root; one subdirectory per node",
    )
    parser.add_argument(
        "--random-faults",
        action="store_true",
        help="a random fault 20-45 s after start, then every 2-5 minutes",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        type=_fault,
        metavar="HOST:KIND@SECONDS[:GPU_INDEX]",
        help="scheduled fault (repeatable); KIND: gpu_lost, off_bus (lost without an Xid), "
        "nvml_hang, lost_at_start (at @0: a GPU the first report lacks), thermal_throttle, "
        "agent_stop, nvlink_down, xid or xidNN (e.g. xid48), xid_repeat (Xid 48 three times), "
        "and ib_port_down or ib_flap (GPU_INDEX is then the port) or storage_slow",
    )
    parser.add_argument("--seed", type=int, default=None, help="reseed all simulators")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING …")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fleet until SIGINT/SIGTERM; flush the spools and return 0."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        nodes = load_fleet_file(args.fleet_file)
        fleet = SimFleet(
            nodes,
            server_url=args.server,
            spool_root=args.spool_dir,
            interval_s=args.interval,
            batch_interval_s=args.batch_interval,
            faults=args.fault,
            random_faults=args.random_faults,
            seed=args.seed,
        )
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    stop = threading.Event()

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    fleet.start()
    log.info("simfleet: %d agents pushing to %s", len(fleet.agents), args.server)
    while not stop.wait(30.0):
        log.info("simfleet: %s", fleet.totals())
    fleet.stop()
    log.info("simfleet stopped: %s", fleet.totals())
    return 0


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _fault(text: str) -> ScheduledFault:
    try:
        return parse_fault(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


if __name__ == "__main__":
    sys.exit(main())

"""``fleetwatch-agent``: the node agent's command line.

``fleetwatch-agent --collector simulated --once --print`` prints one payload and exits without a
server or token; ``fleetwatch-agent --server URL --token-file PATH`` runs until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from agents import __version__
from agents.agent import Agent, AgentConfig, snapshot_payload
from agents.collectors import Collector, CollectorUnavailable, create_collector
from agents.collectors.host import HostSource
from agents.enroll import ENROLL_ENV, EnrollFailed, enroll, save_token
from agents.nvlink_thinner import MAX_INTERVAL_S as MAX_SEND_INTERVAL_S
from agents.payload import encode_payload, utc_now, validate_hostname, validate_labels
from agents.pci_gpus import nvidia_gpu_count
from agents.push import TOKEN_ENV
from agents.self_test import self_test_xid_event
from agents.sources import SourcePaths, choose_collector, host_sources
from agents.spool import DEFAULT_MAX_BYTES

log = logging.getLogger("agents.main")

_SIZE_SUFFIXES = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
#: The shortest watch interval: below it the agent would poll the kernel log and NVML
#: without pause for no gain in latency worth having.
MIN_WATCH_INTERVAL_S = 0.1


def default_spool_dir() -> Path:
    """``/var/lib/fleetwatch-agent/spool`` for root, else ``$XDG_STATE_HOME`` (default
    ``~/.local/state``) ``/fleetwatch-agent/spool``."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/fleetwatch-agent/spool")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "fleetwatch-agent" / "spool"


def build_parser() -> argparse.ArgumentParser:
    """Return the ``fleetwatch-agent`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="fleetwatch-agent",
        description="Fleetwatch node agent: samples the GPUs and pushes them to the server.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--server", help="server base URL, e.g. https://fleetwatch.example:8000")
    tokens = parser.add_mutually_exclusive_group()
    tokens.add_argument("--token", help=f"ingest token (or set {TOKEN_ENV})")
    tokens.add_argument("--token-file", type=Path, help="file holding the ingest token")
    parser.add_argument(
        "--enroll-token",
        help=f"enrollment token (or set {ENROLL_ENV}): with --token-file naming a file that does "
        "not exist yet, the agent gets its own token from the server and saves it there",
    )
    parser.add_argument("--hostname", default=socket.gethostname(), help="node name to report")
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        type=_label,
        metavar="KEY=VALUE",
        help="node label, repeatable (cluster, ib_pod, rack, team …)",
    )
    parser.add_argument(
        "--collector",
        choices=("auto", "nvml", "nvidia-smi", "sim", "simulated"),
        default="auto",
        help="GPU data source: auto (NVML, else nvidia-smi, else no GPUs), nvml, nvidia-smi, "
        "or sim (a simulated node, never chosen by auto)",
    )
    parser.add_argument(
        "--nvidia-smi", default="nvidia-smi", metavar="PATH", help="nvidia-smi binary to run"
    )
    parser.add_argument("--procfs", type=Path, default=Path("/proc"), help="procfs root")
    parser.add_argument("--sysfs", type=Path, default=Path("/sys"), help="sysfs root")
    parser.add_argument(
        "--rootfs", type=Path, default=Path("/"), help="root of the mounts to measure"
    )
    parser.add_argument(
        "--kmsg", type=Path, default=None, help="kernel log file to follow instead of /dev/kmsg"
    )
    parser.add_argument(
        "--sim-gpus", type=_gpu_count, default=8, help="GPUs of a simulated node (default 8)"
    )
    parser.add_argument(
        "--inject-test-xid",
        type=_xid,
        default=None,
        metavar="XID",
        help="with --once: send a synthetic Xid marked TEST (e.g. 79) for --inject-gpu, to prove "
        "the alert path from this node to the on-call channel; it clears by itself",
    )
    parser.add_argument(
        "--inject-gpu",
        type=_gpu_count,
        default=0,
        metavar="INDEX",
        help="GPU of the test Xid (default 0)",
    )
    parser.add_argument(
        "--expected-gpus",
        type=_expected_gpus,
        default=None,
        metavar="N|auto",
        help="GPUs this node should have (default auto: NVIDIA display controllers on PCI, "
        "under --sysfs); fewer enumerated count as missing on the server",
    )
    parser.add_argument("--seed", type=int, default=None, help="simulator seed (default: hostname)")
    parser.add_argument(
        "--interval",
        type=_positive,
        default=10.0,
        help="GPU sampling period, s (default 10; Xids and lost GPUs are sent within "
        "--watch-interval, not at the next sample)",
    )
    parser.add_argument(
        "--batch-interval",
        type=_positive,
        default=20.0,
        help="batch period, s (default 20; an Xid, a GPU lost, a link or port state change: "
        "at once)",
    )
    parser.add_argument(
        "--nvlink-interval",
        type=_send_interval,
        default=60.0,
        help="send NVLink readings every this many seconds, and at once when a link's state, "
        "peer or error counters change (0: every sample; default 60)",
    )
    parser.add_argument(
        "--host-interval",
        type=_send_interval,
        default=60.0,
        help="send disk, mount, NFS and NIC port readings every this many seconds (rates "
        "averaged over it), and at once when a port's state or a mount changes (0: every "
        "sample; default 60)",
    )
    parser.add_argument(
        "--watch-interval",
        type=_watch_interval,
        default=1.0,
        help="between samples, look this often for an Xid in the kernel log or NVML's event "
        "set and send it at once (0: only at each sample; default 1)",
    )
    parser.add_argument(
        "--spool-dir",
        type=Path,
        default=None,
        help="spool directory (default /var/lib/fleetwatch-agent/spool as root, else "
        "$XDG_STATE_HOME/fleetwatch-agent/spool, ~/.local/state without XDG_STATE_HOME)",
    )
    parser.add_argument(
        "--spool-max-bytes",
        type=_size,
        default=DEFAULT_MAX_BYTES,
        help="spool bound, bytes (suffix K, M or G allowed; default 256M)",
    )
    parser.add_argument(
        "--connect-timeout", type=_positive, default=5.0, help="seconds (default 5)"
    )
    parser.add_argument(
        "--timeout", type=_positive, default=30.0, help="total per push, seconds (default 30)"
    )
    parser.add_argument("--once", action="store_true", help="collect and push one batch, exit")
    parser.add_argument(
        "--print", action="store_true", help="with --once: print the payload, send nothing"
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING …")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent; return the exit status (0 ok, 1 a ``--once`` push failed, 2 bad usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        validate_hostname(args.hostname)
    except ValueError as exc:
        parser.error(f"argument --hostname: {exc}")
    try:
        labels = validate_labels(dict(args.label))
    except ValueError as exc:
        parser.error(f"argument --label: {exc}")
    if args.print and not args.once:
        parser.error("argument --print: only with --once")
    if args.inject_test_xid is not None and not args.once:
        parser.error("argument --inject-test-xid: only with --once (one test batch, then exit)")
    collector, sources = _sources(parser, args)
    expected = args.expected_gpus
    if expected is None and collector.name != "simulated":  # a simulated node says its own
        expected = nvidia_gpu_count(args.sysfs)
    if args.print:
        payload = snapshot_payload(
            collector, args.hostname, labels, host_sources=sources, expected_gpus=expected
        )
        sys.stdout.write(encode_payload(payload, indent=2).decode("utf-8") + "\n")
        return 0
    if not args.server:
        parser.error("argument --server is required (unless --once --print)")
    token = _token(parser, args)
    config = AgentConfig(
        hostname=args.hostname,
        spool_dir=args.spool_dir or default_spool_dir(),
        server_url=args.server,
        token=token,
        labels=labels,
        interval_s=args.interval,
        batch_interval_s=args.batch_interval,
        nvlink_interval_s=args.nvlink_interval,
        host_interval_s=args.host_interval,
        watch_interval_s=args.watch_interval,
        spool_max_bytes=args.spool_max_bytes,
        connect_timeout_s=args.connect_timeout,
        timeout_s=args.timeout,
        expected_gpus=expected,
    )
    try:
        agent = Agent(config, collector, host_sources=sources)
    except OSError as exc:
        parser.error(f"argument --spool-dir: {exc}")
    if args.once:
        extra = []
        if args.inject_test_xid is not None:
            try:
                extra = [
                    self_test_xid_event(
                        collector.inventory(),
                        xid=args.inject_test_xid,
                        gpu_index=args.inject_gpu,
                        now=utc_now(),
                    )
                ]
            except ValueError as exc:
                parser.error(str(exc))
            log.warning("sending a TEST Xid %d for GPU %d", args.inject_test_xid, args.inject_gpu)
        emptied = agent.run_once(extra)
        if agent.last_refusal is not None:  # said on stderr already, with what to fix
            log.error("the batch stays in the spool %s until that is fixed", config.spool_dir)
            return 1
        if agent.batches_rejected:
            log.error("the server refused the batch (HTTP %s); it was dropped", agent.last_status)
            return 1
        return 0 if emptied else 1
    stop = threading.Event()

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    log.info("fleetwatch-agent %s: %s → %s", __version__, args.hostname, args.server)
    agent.run(stop)
    log.info("%s", stop_summary(agent))
    return 0


def stop_summary(agent: Agent) -> str:
    """The agent's last log line: what it collected, what the server acknowledged, what was
    lost (by cause) and what stays spooled for its next start."""
    return (
        f"stopped: {agent.samples_generated} samples collected, {agent.samples_acked} "
        f"acknowledged; {agent.batches_dropped} batch(es) lost ({agent.spool.dropped_batches} "
        f"dropped from a full spool or disk, {agent.batches_unwritable} unwritable, "
        f"{agent.batches_rejected} refused, {agent.batches_refused_for_skew} refused for "
        f"clock skew); {len(agent.spool)} "
        "batch(es) still spooled"
    )


def _sources(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[Collector, list[HostSource]]:
    """The GPU collector and host sources asked for; says on stderr which collector runs and
    why. A simulated node gets simulated host data too."""
    if args.collector in ("sim", "simulated"):
        collector = create_collector(
            "simulated", hostname=args.hostname, gpu_count=args.sim_gpus, seed=args.seed
        )
        log.info("collector simulated (asked for): the data is not real")
        ignored = [
            flag
            for flag, value, default in (
                ("--procfs", args.procfs, Path("/proc")),
                ("--sysfs", args.sysfs, Path("/sys")),
                ("--rootfs", args.rootfs, Path("/")),
                ("--kmsg", args.kmsg, None),
            )
            if value != default
        ]
        if ignored:
            log.warning("%s ignored: a simulated node simulates its host too", ", ".join(ignored))
        return collector, simulated_host_sources(collector)
    paths = SourcePaths(
        procfs=args.procfs,
        sysfs=args.sysfs,
        rootfs=args.rootfs,
        kmsg=args.kmsg,
        nvidia_smi=args.nvidia_smi,
    )
    try:
        chosen, why = choose_collector(args.collector, paths)
    except CollectorUnavailable as exc:
        # Never fall back to simulated data on its own: a dashboard fed made-up numbers for a
        # real node is worse than a node that shows as never seen.
        parser.error(f"argument --collector: {exc}")
    log.warning(why) if chosen.name == "none" else log.info(why)
    return chosen, host_sources(chosen, paths)


def simulated_host_sources(collector: Collector) -> list[HostSource]:
    """The simulator's storage and NIC source for ``collector``, where the simulator has one."""
    try:
        from agents.simulated.host import SimulatedHostSource
    except ImportError:
        return []
    return [SimulatedHostSource(collector)]


def _token(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    token: str | None = args.token
    enroll_token = (args.enroll_token or os.environ.get(ENROLL_ENV, "")).strip()
    if enroll_token and args.token_file is None:
        parser.error("argument --enroll-token needs --token-file (where to keep the node's token)")
    if enroll_token and not args.token_file.exists():
        try:
            token = enroll(args.server, enroll_token, args.hostname)
            save_token(args.token_file, token)
        except (EnrollFailed, OSError) as exc:
            parser.error(f"argument --enroll-token: {exc}")
        log.info("enrolled %s; its token is in %s", args.hostname, args.token_file)
        return token
    if args.token_file is not None:
        try:
            token = args.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            parser.error(f"argument --token-file: {exc}")
    token = token or os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        parser.error(f"argument --token/--token-file is required (or set {TOKEN_ENV})")
    return token


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (missing '=')")
    try:
        validate_labels({key: value})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return key, value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return value


def _send_interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= MAX_SEND_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"must be 0 to {MAX_SEND_INTERVAL_S:.0f} seconds: {text!r}"
        )
    return value


def _watch_interval(text: str) -> float:
    value = _send_interval(text)
    if 0 < value < MIN_WATCH_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"must be 0 (off) or {MIN_WATCH_INTERVAL_S} to {MAX_SEND_INTERVAL_S:.0f} seconds: "
            f"{text!r}"
        )
    return value


def _xid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an Xid number such as 79, got {text!r}"
        ) from None
    if not 0 < value < 2**31:
        raise argparse.ArgumentTypeError(f"expected an Xid number such as 79, got {text!r}")
    return value


def _expected_gpus(text: str) -> int | None:
    """``auto`` (None: counted on PCI) or a GPU count 0..1024."""
    if text.strip().lower() == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N (0..1024) or auto, got {text!r}") from None
    if not 0 <= value <= 1024:
        raise argparse.ArgumentTypeError(f"expected N (0..1024) or auto, got {text!r}")
    return value


def _gpu_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= 256:
        raise argparse.ArgumentTypeError(f"must be 0..256: {text!r}")
    return value


def _size(text: str) -> int:
    stripped = text.strip().lower().removesuffix("ib").removesuffix("b")
    suffix = stripped[-1:] if stripped[-1:] in _SIZE_SUFFIXES else ""
    try:
        value = int(float(stripped.removesuffix(suffix)) * _SIZE_SUFFIXES[suffix])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


if __name__ == "__main__":
    sys.exit(main())

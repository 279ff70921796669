"""``fleetwatch demo``: the server plus a simulated fleet in a child process, over real HTTP.

The fleet runs as ``python -m agents.simfleet`` in its own process because the server never
imports the agent (they are installed separately on real machines).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import uvicorn

from app.auth import service as auth_service
from app.config import Settings
from app.db import make_engine, make_session_factory, session_scope
from app.dcgm.targets import shown_url
from app.errors import NotFound
from app.job_scheduler import exit_if_jobs_left_running
from app.main import create_app
from app.migrate import upgrade

log = logging.getLogger(__name__)

TEAMS = ("llm-training", "inference", "research", "vision")


def demo_fleet(count: int, gpus_per_node: int | None) -> list[dict[str, object]]:
    """Hostnames and labels of the simulated nodes: pods of 4 nodes, racks of 2, teams by pod.

    Without ``gpus_per_node`` the fleet is mixed like a real one: in each pod three 8-GPU HGX
    H100 nodes and one 4-GPU PCIe L40S inference box.
    """
    fleet = []
    for i in range(count):
        pod = i // 4 + 1
        gpus = gpus_per_node if gpus_per_node is not None else (4 if i % 4 == 3 else 8)
        fleet.append(
            {
                "hostname": f"gpu-{pod:02d}-{i % 4 + 1:02d}",
                "gpu_count": gpus,
                "labels": {
                    "cluster": "demo",
                    "ib_pod": f"pod-{pod:02d}",
                    "rack": f"r{i // 2 + 1:03d}",
                    "team": TEAMS[(pod - 1) % len(TEAMS)],
                },
            }
        )
    return fleet


def write_fleet_file(settings: Settings, fleet: list[dict[str, object]], path: Path) -> None:
    """Create a token per node (revoking the previous demo's) and write the fleet file the
    simulator reads, readable by the owner only (it holds tokens)."""
    engine = make_engine(settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            for node in fleet:
                hostname = str(node["hostname"])
                with contextlib.suppress(NotFound):  # a node this database has not seen yet
                    auth_service.revoke_tokens(session, hostname=hostname)
                _, node["token"] = auth_service.create_token(session, hostname=hostname)
    finally:
        engine.dispose()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"nodes": fleet}, fh, indent=2)


def start_fleet_process(
    server_url: str,
    fleet_file: Path,
    work_dir: Path,
    *,
    interval_s: float,
    random_faults: bool,
) -> subprocess.Popen[bytes]:
    """Start ``python -m agents.simfleet`` pushing to ``server_url`` (spools under work_dir)."""
    cmd = [
        sys.executable, "-m", "agents.simfleet",
        "--server", server_url,
        "--fleet-file", str(fleet_file),
        "--interval", str(interval_s),
        "--spool-dir", str(work_dir / "spool"),
    ]  # fmt: skip
    if random_faults:
        cmd.append("--random-faults")
    # Its own session: the terminal's Ctrl-C reaches the server, which stops the fleet first.
    # A parent-death signal ends it if the demo dies any other way (SIGHUP, SIGKILL).
    return subprocess.Popen(cmd, start_new_session=True, preexec_fn=_terminate_with_parent)


def _terminate_with_parent() -> None:
    """In the child, before exec: ask Linux for SIGTERM when the parent dies
    (``prctl(PR_SET_PDEATHSIG)``; "parent" is the thread that forked, so that thread must live as
    long as the child); elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 15) -> None:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_fleet(
    settings: Settings,
    *,
    server_url: str,
    nodes: int,
    gpus_per_node: int | None,
    interval_s: float,
    random_faults: bool,
    work_dir: Path,
) -> int:
    """Create tokens in the database and run a simulated fleet against a server elsewhere (the
    docker-compose ``fleet`` service) until SIGINT/SIGTERM."""
    fleet_file = work_dir / "fleet.json"
    write_fleet_file(settings, demo_fleet(nodes, gpus_per_node), fleet_file)
    proc = start_fleet_process(
        server_url, fleet_file, work_dir, interval_s=interval_s, random_faults=random_faults
    )
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        stop_process(proc)


def apply_default_rules(settings: Settings) -> None:
    """Create or update the default alert rule pack, so the demo fleet's faults fire alerts."""
    from app.alerts.rule_reach import Kept
    from app.alerts.rulefiles import DEFAULT_RULES_DIR, apply_path

    engine = make_engine(settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            report = apply_path(
                session, path=DEFAULT_RULES_DIR, defaults=True, kept=Kept.of(settings)
            )
    finally:
        engine.dispose()
    log.info(
        "default alert rules: %d created, %d updated", len(report.created), len(report.updated)
    )


def add_webhook(settings: Settings, *, url: str, secret: str | None) -> None:
    """Add (or update) the demo's generic-webhook channel with a catch-all route, so every
    team's alerts are POSTed to ``url`` (signed with ``secret`` when given)."""
    from app.notify import service as notify_service
    from app.notify.secrets import SecretBox, mask_url

    engine = make_engine(settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            notify_service.ensure_webhook_channel(
                session,
                url=url,
                secret=secret,
                box=SecretBox.from_settings(settings),
                allow_hosts=settings.notify_allow_hosts,
            )
    finally:
        engine.dispose()
    log.info("demo webhook: every team's alerts go to %s", mask_url(url))


DEMO_ADMIN = "admin"


def ensure_demo_admin(settings: Settings) -> str:
    """Create the demo's ``admin`` user, or give it a new password when it exists; returns the
    one-time password (printed once; only its argon2 hash is stored)."""
    from app.access import sessions, users
    from app.access.roles import Role
    from app.audit import service as audit

    engine = make_engine(settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            existing = users.find_user(session, DEMO_ADMIN)
            if existing is None:
                _, password = users.create_user(session, name=DEMO_ADMIN, role=Role.admin)
            else:
                password = secrets.token_urlsafe(15)
                users.set_password(session, name=DEMO_ADMIN, password=password)
                sessions.revoke_user_sessions(session, existing.id)
            audit.record(
                session, actor="cli:demo", action="user.create", target={"user": DEMO_ADMIN}
            )
    finally:
        engine.dispose()
    return password


def run_demo(
    settings: Settings,
    *,
    nodes: int,
    gpus_per_node: int | None,
    interval_s: float,
    random_faults: bool,
    work_dir: Path,
    webhook: str | None = None,
    webhook_secret: str | None = None,
) -> int:
    """Run until Ctrl-C (SIGINT) or SIGTERM; returns the process exit code. With ``webhook``
    a generic-webhook channel receives every team's firing and resolved notices."""
    upgrade(settings.effective_database_url)
    apply_default_rules(settings)
    if webhook:
        add_webhook(settings, url=webhook, secret=webhook_secret)
    admin_password = ensure_demo_admin(settings)
    fleet_file = work_dir / "fleet.json"
    write_fleet_file(settings, demo_fleet(nodes, gpus_per_node), fleet_file)

    fleet_proc: list[subprocess.Popen[bytes]] = []

    class DemoServer(uvicorn.Server):
        """Stops the simulated fleet before the server on Ctrl-C, so the agents' last batches
        are delivered instead of spooled against a closed port."""

        stopping = False

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # This runs on the event loop's thread: waiting for the fleet here would stall the
            # loop, and the agents' last pushes with it. Wait in a thread; a second Ctrl-C
            # while it waits goes to uvicorn (force exit).
            if not fleet_proc or self.stopping:
                super().handle_exit(sig, frame)
                return
            self.stopping = True

            def stop_fleet_then_server() -> None:
                for proc in fleet_proc:
                    stop_process(proc)
                super(DemoServer, self).handle_exit(sig, frame)

            threading.Thread(target=stop_fleet_then_server, name="demo-stop", daemon=True).start()

    demo_app = create_app(settings)
    server = DemoServer(
        uvicorn.Config(demo_app, host=settings.host, port=settings.port, log_level="warning")
    )
    url_host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    url = f"http://{url_host}:{settings.port}"

    shape = (
        f"{gpus_per_node} GPUs each"
        if gpus_per_node
        else "8-GPU HGX H100 and 4-GPU PCIe L40S nodes"
    )

    def start_fleet() -> None:
        while not server.started:
            if server.should_exit:
                return
            time.sleep(0.05)
        fleet_proc.append(
            start_fleet_process(
                url, fleet_file, work_dir, interval_s=interval_s, random_faults=random_faults
            )
        )
        pulled = "".join(
            f"  pulling dcgm-exporter {shown_url(endpoint)} (status: {url}/api/v1/dcgm/endpoints)\n"
            for endpoint in settings.dcgm_endpoints
        )
        print(
            f"\nFleetwatch demo: {nodes} simulated nodes ({shape}) pushing to {url}\n"
            f"{pulled}"
            f"  open {url}/  (API docs: {url}/docs)   database: {settings.effective_database_url}\n"
            f"  log in as {DEMO_ADMIN} with the one-time password {admin_password}\n"
            "  Ctrl-C stops everything.\n",
            flush=True,
        )
        # Linux sends the parent-death signal when the forking *thread* ends: stay with it.
        fleet_proc[-1].wait()

    starter = threading.Thread(target=start_fleet, daemon=True)
    starter.start()
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # uvicorn re-raises the Ctrl-C it handled; stopping is what the user asked for
    finally:
        server.should_exit = True
        starter.join(timeout=5)
        for proc in fleet_proc:
            stop_process(proc)
        exit_if_jobs_left_running(getattr(demo_app.state, "jobs_left_running", []))
    if not server.started:
        log.error("the demo server could not start (is port %s free?)", settings.port)
        return 1
    return 0

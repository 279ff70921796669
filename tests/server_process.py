"""What the fault scripts (bench/faults/*.py), bench/load_agents.py and their tests share: a
real ``fleetwatch serve`` process on a fresh Postgres database, its backends terminated on
demand, its memory read from ``/proc``, the rows it stored counted, and a summary printed.

Only loopback: servers listen on 127.0.0.1; Postgres is the machine's (``FLEETWATCH_TEST_
DATABASE_URL`` or ``postgresql://postgres@127.0.0.1:5432/postgres``), on which each run creates
and drops its own database (never restarted: other people's tests share it).
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url

from app.db import make_engine
from app.fleet.models import Gpu
from app.series.tables import gpu_sample

ROOT = Path(__file__).resolve().parents[1]


def operator_token(db_url: str, *, role: str = "admin") -> str:
    """An API token for the scripts' reads and changes, made as an operator makes one:
    ``fleetwatch api-token create`` on ``db_url`` (migrated).

    Raises:
        RuntimeError: the command failed (its stderr said).
    """
    command = [sys.executable, "-m", "app", "api-token", "create", f"fault-script-{role}"]
    done = subprocess.run(
        [*command, "--role", role, "--database-url", db_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    token = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode != 0 or not token.startswith("fwk_"):
        raise RuntimeError(f"fleetwatch api-token create failed: {done.stderr.strip()[-500:]}")
    return token


class ServerProcess:
    """``python -m app serve`` on 127.0.0.1:``port`` for ``db_url``, as an operator runs it.

    ``env`` adds ``FLEETWATCH_*`` settings; ``jobs`` runs the background jobs in it (else
    ``--no-jobs``); ``args`` are more ``serve`` options (``["--workers", "2"]``). Output goes
    to ``log_path``. :meth:`start` may be called again after :meth:`kill` or :meth:`stop`
    (same port). :attr:`api` is an HTTP client that sends an
    admin API token (access control is on, as in production), made at the first start.
    """

    def __init__(
        self,
        db_url: str,
        port: int,
        log_path: Path,
        *,
        jobs: bool = True,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.db_url = db_url
        self.args = list(args)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.jobs = jobs
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self._api: httpx.Client | None = None
        self.token = ""

    @property
    def api(self) -> httpx.Client:
        """A client whose requests carry ``Authorization: Bearer <admin API token>`` (a
        request's own ``headers`` win, e.g. an agent token)."""
        if self._api is None:
            self.token = self.token or operator_token(self.db_url)
            self._api = httpx.Client(headers={"Authorization": f"Bearer {self.token}"})
        return self._api

    def close_api(self) -> None:
        """Close :attr:`api`'s connections (called by :meth:`stop`; the token is kept)."""
        if self._api is not None:
            self._api.close()
            self._api = None

    def start(self, timeout_s: float = 60.0) -> float:
        """Start the process and wait until ``/readyz`` answers 200; return the seconds taken.

        Raises:
            RuntimeError: it exited or was not ready within ``timeout_s`` (its log's end said).
        """
        env = {**os.environ, "FLEETWATCH_DATABASE_URL": self.db_url, **self.env}
        env.setdefault("FLEETWATCH_LOG_LEVEL", "warning")
        command = [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--jobs" if self.jobs else "--no-jobs", *self.args]
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        wait_ready(self.url, timeout_s, self.proc, self.log_path)
        return time.monotonic() - started

    def kill(self) -> None:
        """``kill -9``: no shutdown, no last commit, open transactions rolled back by Postgres."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 20 s); closes :attr:`api`."""
        self.close_api()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def rss_bytes(self) -> int | None:
        """The process's resident set size (``VmRSS`` of ``/proc/<pid>/status``), or None."""
        return None if self.proc is None else rss_bytes(self.proc.pid)


class WorkerProcess:
    """``python -m app worker`` (the background jobs, no HTTP) for ``db_url``; output to
    ``log_path``."""

    def __init__(self, db_url: str, log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.db_url = db_url
        self.log_path = log_path
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it (it runs until :meth:`stop`)."""
        env = {**os.environ, "FLEETWATCH_DATABASE_URL": self.db_url, **self.env}
        env.setdefault("FLEETWATCH_LOG_LEVEL", "warning")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app", "worker"], cwd=ROOT, env=env, stdout=log, stderr=log
            )

    def kill(self) -> None:
        """``kill -9``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 20 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_ready(
    url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None, log_path: Path
) -> None:
    """Poll ``{url}/readyz`` until 200.

    Raises:
        RuntimeError: ``proc`` exited, or not ready within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log_tail(log_path)}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server not ready within {timeout_s:g} s: {log_tail(log_path)}")


def log_tail(path: Path, chars: int = 2000) -> str:
    """The end of a log file ('' when absent)."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def rss_bytes(pid: int) -> int | None:
    """``VmRSS`` of process ``pid`` in bytes (Linux ``/proc``), None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


@dataclass(frozen=True)
class Terminated:
    """The sessions one :func:`terminate_backends` ended: all of them, those running a
    statement at that moment, and those of these whose statement named an alert or notify
    table (rule evaluation, the notification worker)."""

    sessions: int
    active: int
    alerting: int


_SESSIONS = (
    "FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend'"
)
_END_ALL = f"SELECT state, query, pg_terminate_backend(pid) AS ended {_SESSIONS}"
_END_ALL_IF_RUNNING = (
    f"{_END_ALL} AND EXISTS (SELECT 1 {_SESSIONS} AND state = 'active' "
    "AND strpos(query, :pattern) > 0)"
)


def terminate_backends(db_url: str) -> Terminated:
    """``pg_terminate_backend`` every other session on ``db_url``'s database (what a Postgres
    restart looks like to the server's pools, without restarting the shared Postgres)."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text(_END_ALL), {"db": make_url(db_url).database}).all()
    finally:
        engine.dispose()
    return _tally(rows)


def terminate_while_running(db_url: str, pattern: str, within_s: float) -> Terminated | None:
    """Poll (every 2 ms, at most ``within_s``) until a session of ``db_url``'s database runs a
    statement containing ``pattern`` (``alert_instance``: a rule evaluation), and in the same
    statement end every session as :func:`terminate_backends` does; None when none ran one."""
    engine = make_engine(db_url)
    params = {"db": make_url(db_url).database, "pattern": pattern}
    try:
        with engine.connect() as conn:
            deadline = time.monotonic() + within_s
            while time.monotonic() < deadline:
                rows = conn.execute(text(_END_ALL_IF_RUNNING), params).all()
                conn.rollback()  # a fresh pg_stat_activity snapshot next time
                if rows:
                    return _tally(rows)
                time.sleep(0.002)
            return None
    finally:
        engine.dispose()


def _tally(rows: Sequence[Any]) -> Terminated:
    ended = [r for r in rows if r.ended]
    active = [r for r in ended if r.state == "active"]
    alerting = [r for r in active if "alert_" in (r.query or "") or "notify_" in (r.query or "")]
    return Terminated(len(ended), len(active), len(alerting))


def stored_samples(db_url: str) -> tuple[int, int]:
    """(GPU sample rows, distinct ``(gpu_id, sampled_at)`` keys) stored in ``db_url``."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.scalar(select(func.count()).select_from(gpu_sample)) or 0
            keys = select(gpu_sample.c.gpu_id, gpu_sample.c.sampled_at).distinct().subquery()
            distinct = conn.scalar(select(func.count()).select_from(keys)) or 0
        return int(rows), int(distinct)
    finally:
        engine.dispose()


def stored_sample_keys(db_url: str) -> set[tuple[str, datetime]]:
    """``(gpu uuid, sampled_at)`` of every GPU sample row stored in ``db_url``."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(Gpu.uuid, gpu_sample.c.sampled_at).join(Gpu, Gpu.id == gpu_sample.c.gpu_id)
            )
            return {(uuid, at) for uuid, at in rows}
    finally:
        engine.dispose()


@contextmanager
def fresh_database() -> Iterator[str]:
    """A migrated Postgres database of its own (dropped at the end); yields its URL."""
    from tests.dbs import postgres_database

    with postgres_database() as url:
        yield url


def machine() -> str:
    """One line naming the machine the figures were measured on."""
    cpus = os.cpu_count() or 0
    try:
        one, five, fifteen = os.getloadavg()
        load = f"load {one:.2f} {five:.2f} {fifteen:.2f}"
    except OSError:
        load = "load ?"
    python = platform.python_version()
    return f"{platform.node()} ({platform.machine()}, {cpus} CPUs, {load}, Python {python})"


def summary(fault: str, rows: list[tuple[str, object]]) -> str:
    """The printed summary: the fault, then one ``name: value`` line per figure."""
    width = max(len(name) for name, _ in rows)
    lines = [f"== {fault} ==", f"machine: {machine()}"]
    lines += [f"{name.ljust(width)} : {value}" for name, value in rows]
    return "\n".join(lines)


def wait_for(predicate: object, timeout_s: float, step_s: float = 0.1) -> float | None:
    """Call ``predicate()`` until true; seconds waited, or None at ``timeout_s``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if predicate():  # type: ignore[operator]
            return time.monotonic() - started
        time.sleep(step_s)
    return None

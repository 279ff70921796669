"""``fleetwatch lifecycle …`` on Postgres and SQLite: quarantine runs the drain here and prints
its command and outcome, show lists the history and the log, resume returns the node, a failing
command exits 1, the breaker commands, and bad arguments exit 2 naming the option."""

from __future__ import annotations

from app.db import session_scope
from app.fleet import service as fleet_service
from tests.app.test_cli import fleetwatch
from tests.dbs import session_factory
from tests.factories import create_token

ECHO = {"FLEETWATCH_SLURM_SCONTROL": "/bin/echo"}


def _node(url: str, hostname: str) -> None:
    create_token(url, hostname)
    with session_factory(url) as factory, session_scope(factory) as session:
        fleet_service.get_or_create_node(session, hostname=hostname)


def test_quarantine_show_resume(db_url: str) -> None:
    _node(db_url, "gpu-07.example")
    db = ("--database-url", db_url)
    done = fleetwatch(
        "lifecycle",
        "quarantine",
        "gpu-07.example",
        "--reason",
        "Xid 79",
        "--actor",
        "bob",
        *db,
        env=ECHO,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "gpu-07.example: in_service → quarantined"
    assert "slurm drain gpu-07 [succeeded, 1 attempt(s)] → exit 0" in lines[1]
    assert (
        lines[2].strip()
        == "$ /bin/echo update NodeName=gpu-07 State=DRAIN 'Reason=fleetwatch: Xid 79'"
    )

    shown = fleetwatch("lifecycle", "show", "gpu-07.example", *db, env=ECHO)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("gpu-07.example: quarantined since ")
    assert "in_service → quarantined  by bob (person): Xid 79" in shown.stdout

    back = fleetwatch("lifecycle", "resume", "gpu-07.example", "--reason", "reset", *db, env=ECHO)
    assert back.returncode == 0 and "slurm resume gpu-07 [succeeded" in back.stdout


def test_failures_and_bad_arguments(db_url: str) -> None:
    _node(db_url, "n1")
    db = ("--database-url", db_url)
    failing = fleetwatch(
        "lifecycle",
        "quarantine",
        "n1",
        "--reason",
        "x",
        *db,
        env={"FLEETWATCH_SLURM_SCONTROL": "/bin/false"},
    )
    assert failing.returncode == 1
    assert "[pending, 1 attempt(s)] → exit 1" in failing.stdout
    assert "the server's worker retries it" in failing.stderr
    refused = fleetwatch("lifecycle", "set", "n1", "remediating", "--reason", "x", *db)
    assert refused.returncode == 0  # quarantined → remediating is allowed, no action
    assert "these settings manage no scheduler" in refused.stderr
    off = fleetwatch("lifecycle", "set", "n1", "in_service", "--reason", "x", *db)
    assert (
        off.returncode == 1
        and "it can go to quarantined, validating, rma, not in_service" in off.stderr
    )
    unknown = fleetwatch("lifecycle", "set", "n1", "drained", "--reason", "x", *db)
    assert unknown.returncode == 2 and "STATE: unknown lifecycle state 'drained'" in unknown.stderr
    blank = fleetwatch("lifecycle", "quarantine", "n1", "--reason", "  ", *db)
    assert blank.returncode == 2 and "--reason: say why, in 1 to 1024 characters" in blank.stderr
    nobody = fleetwatch("lifecycle", "show", "nobody", *db)
    assert nobody.returncode == 1 and "nobody" in nobody.stderr

    breaker = fleetwatch("lifecycle", "breaker", *db)
    assert breaker.returncode == 0 and breaker.stdout.startswith("closed")
    bad = fleetwatch("lifecycle", "breaker-reset", "--actor", "bob\nINJECTED", *db)
    assert bad.returncode == 2 and "--actor: contains the control character U+000A" in bad.stderr
    empty = fleetwatch("lifecycle", "breaker-reset", "--actor", " ", *db)
    assert empty.returncode == 2 and "--actor: say who" in empty.stderr
    reset = fleetwatch("lifecycle", "breaker-reset", "--actor", "alice", *db)
    assert reset.returncode == 0
    again = fleetwatch("lifecycle", "breaker", *db)
    assert "reset" in again.stdout and "by alice" in again.stdout

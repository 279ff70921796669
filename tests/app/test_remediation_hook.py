"""The remediation hook (``FLEETWATCH_REMEDIATION_HOOK``): entering ``remediating`` logs the
site's command with its placeholders filled per word (a reason with spaces and quotes stays
one argument, nothing goes through a shell) and the worker runs it; a failing hook is retried;
a dry run logs it only; a bad setting stops start-up naming the variable. Postgres and
SQLite."""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import SettingsError, load_settings
from app.remediation import hook
from app.remediation.worker import ActionWorker
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import batch, create_token
from tests.live_server import LiveServer

HOST = "gpu-node-09.cluster.example"
REASON = 'Xid 79 on GPU 3; it\'s "off the bus" $(reboot)'


def _script(tmp_path: Path, exit_code: int = 0) -> Path:
    """A hook that writes its argv as JSON next to itself and exits ``exit_code``."""
    path = tmp_path / "power-cycle"
    out = tmp_path / "argv.json"
    path.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(out)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        f"print('power cycle requested'); sys.exit({exit_code})\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _serve(db_url: str, tmp_path: Path, command: str) -> Iterator[LiveServer]:
    live = LiveServer(make_settings(db_url, tmp_path, remediation_hook=command))
    live.start()
    labels = {"slurm_node": "gpu09"}
    assert post_batch(live.url, create_token(db_url, HOST), batch(HOST, labels=labels)).is_success
    yield live
    live.stop()


def _move(live: LiveServer, to_state: str, **extra: Any) -> dict[str, Any]:
    moved = httpx.post(
        f"{live.url}/api/v1/nodes/{HOST}/lifecycle",
        json={"to_state": to_state, "reason": REASON, "actor": "oncall-bob", **extra},
    )
    assert moved.status_code == 200, moved.text
    body: dict[str, Any] = moved.json()
    return body


def _actions(live: LiveServer) -> list[dict[str, Any]]:
    body = httpx.get(f"{live.url}/api/v1/nodes/{HOST}/lifecycle").json()
    actions: list[dict[str, Any]] = body["actions"]
    return actions


@pytest.fixture
def good(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    script = _script(tmp_path)
    yield from _serve(
        db_url, tmp_path, f"{script} --bmc {{hostname}}-bmc --node={{slurm_node}} --why {{reason}}"
    )


def test_entering_remediating_runs_the_hook_with_exact_arguments(
    good: LiveServer, db_url: str, tmp_path: Path
) -> None:
    assert _actions(good) == []
    assert httpx.get(f"{good.url}/api/v1/nodes/{HOST}/lifecycle").json()["managed"] == ["hook"]
    _move(good, "quarantined")
    assert _actions(good) == []  # no scheduler managed: the hook alone, and not yet
    made = _move(good, "remediating")
    script = str(tmp_path / "power-cycle")
    expected = [script, "--bmc", f"{HOST}-bmc", "--node=gpu09", "--why", REASON]
    (logged,) = made["actions"]
    assert (logged["system"], logged["verb"], logged["target"]) == ("hook", "remediate", HOST)
    assert logged["command"] == expected
    with session_factory(db_url) as factory:
        ActionWorker(factory).run_once()
    assert json.loads((tmp_path / "argv.json").read_text()) == expected[1:]
    (done,) = _actions(good)
    assert (done["status"], done["returncode"], done["output"]) == (
        "succeeded",
        0,
        "power cycle requested",
    )
    # Validating, then back: no second run of the hook.
    assert _move(good, "validating")["actions"] == []
    assert len(_actions(good)) == 1


def test_a_dry_run_logs_the_hook_only(good: LiveServer, tmp_path: Path) -> None:
    _move(good, "quarantined")
    (logged,) = _move(good, "remediating", dry_run=True)["actions"]
    assert logged["status"] == "dry_run" and logged["system"] == "hook"
    assert not (tmp_path / "argv.json").exists()


def test_a_failing_hook_is_retried(db_url: str, tmp_path: Path) -> None:
    script = _script(tmp_path, exit_code=3)
    for live in _serve(db_url, tmp_path, f"{script} {{hostname}}"):
        _move(live, "quarantined")
        _move(live, "remediating")
        with session_factory(db_url) as factory:
            report = ActionWorker(factory).run_once()
        assert (report.succeeded, report.retried) == (0, 1)
        (action,) = _actions(live)
        assert (action["status"], action["returncode"], action["attempts"]) == ("pending", 3, 1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("/bin/x {host}", "unknown placeholder {host}"),
        ('/bin/x "{hostname}', "not a command line"),
        ("/bin/x {hostname", "write {{ and }} for braces"),
        ("/bin/x {hostname:d}", "has a conversion or format"),
        ("/bin/x {hostname!r}", "has a conversion or format"),
        ("/bin/x {reason:{actor}}", "has a conversion or format"),
    ],
)
def test_a_bad_hook_stops_start_up_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv("FLEETWATCH_REMEDIATION_HOOK", value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert "FLEETWATCH_REMEDIATION_HOOK" in str(raised.value)
    assert message in str(raised.value)


def test_placeholders_are_filled_per_word() -> None:
    words = hook.parse("/opt/reset --gpu-host '{hostname}' --note 'by {actor}: {reason}' {{x}}")
    assert hook.command(
        words, hostname="n1", slurm_node="n1", k8s_node="n1", reason="a b", actor="me"
    ) == ["/opt/reset", "--gpu-host", "n1", "--note", "by me: a b", "{x}"]


@pytest.mark.parametrize(
    ("script", "words"),
    [
        ("echo no shebang\n", []),  # OSError: Exec format error
        ("#!/bin/sh\nprintf 'caf\\351'\nexit 0\n", []),  # output not UTF-8
        ("#!/bin/sh\nexit 0\n", ["x" * 300_000]),  # argument list too long
    ],
)
def test_a_hook_that_cannot_start_is_retried_never_stuck(
    db_url: str, tmp_path: Path, script: str, words: list[str]
) -> None:
    path = tmp_path / "odd-hook"
    path.write_text(script)
    path.chmod(0o755)
    command = " ".join([str(path), *words])
    for live in _serve(db_url, tmp_path, command):
        _move(live, "quarantined")
        _move(live, "remediating")
        with session_factory(db_url) as factory:
            ActionWorker(factory).run_once()
        (action,) = _actions(live)
        assert action["attempts"] == 1 and action["status"] in ("succeeded", "pending")
        if action["status"] == "pending":  # could not start: retried later, with the reason
            assert action["returncode"] is None and "could not start" in action["output"]
        else:
            assert action["output"] == "caf\ufffd"

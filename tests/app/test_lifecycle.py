"""A node's lifecycle through a real server on Postgres and SQLite: transitions follow the
lifecycle and are recorded with their cause; leaving service logs a Slurm drain with its exact
command, entering it a resume; the action worker runs them, retries a failing command and gives
up after five attempts without losing the row; dry runs are logged and never run; bad input is
refused naming the field. (A real Slurm cluster: tests/e2e/test_slurm_drain.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from app.db import session_scope, utcnow
from app.remediation.models import NodeAction
from app.remediation.worker import MAX_ATTEMPTS, ActionWorker, RunReport
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory, wipe
from tests.factories import batch, create_token
from tests.live_server import LiveServer

ECHO = "/bin/echo"  # prints the argv it is given: the command as scontrol would get it
FALSE = "/bin/false"


def _server(db_url: str, tmp_path: Path, scontrol: str | None) -> Iterator[LiveServer]:
    live = LiveServer(make_settings(db_url, tmp_path, slurm_scontrol=scontrol))
    live.start()
    token = create_token(db_url, "gpu-node-07.cluster.example")
    assert post_batch(live.url, token, batch("gpu-node-07.cluster.example")).status_code == 200
    yield live
    live.stop()


@pytest.fixture
def echo_server(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """A server whose "scontrol" is echo, with one node reporting."""
    yield from _server(db_url, tmp_path, ECHO)


def _move(server: LiveServer, to_state: str, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/v1/nodes/gpu-node-07.cluster.example/lifecycle",
        json={"to_state": to_state, "reason": "Xid 79 on GPU 3", **body},
        timeout=10,
    )


def _lifecycle(server: LiveServer) -> dict[str, Any]:
    response = httpx.get(
        f"{server.url}/api/v1/nodes/gpu-node-07.cluster.example/lifecycle", timeout=10
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_node_that_never_left_service_is_in_service(echo_server: LiveServer) -> None:
    body = _lifecycle(echo_server)
    assert body["state"] == "in_service"
    assert body["since"] is None and body["transitions"] == [] and body["actions"] == []
    assert body["managed"] == ["slurm"]


def test_quarantine_logs_the_exact_drain_and_the_worker_runs_it(
    echo_server: LiveServer, db_url: str
) -> None:
    made = _move(echo_server, "quarantined", actor="alice", cause="incident", cause_ref="42")
    assert made.status_code == 200, made.text
    transition = made.json()["transition"]
    assert (transition["from_state"], transition["to_state"]) == ("in_service", "quarantined")
    assert (transition["actor"], transition["cause"], transition["cause_ref"]) == (
        "alice",
        "incident",
        "42",
    )
    (action,) = made.json()["actions"]
    assert action["status"] == "pending" and action["attempts"] == 0
    assert (action["system"], action["verb"], action["target"]) == ("slurm", "drain", "gpu-node-07")
    assert action["command"] == [
        ECHO,
        "update",
        "NodeName=gpu-node-07",
        "State=DRAIN",
        "Reason=fleetwatch: Xid 79 on GPU 3",
    ]
    with session_factory(db_url) as factory:
        report = ActionWorker(factory).run_once()
    assert (report.succeeded, report.retried, report.failed) == (1, 0, 0)
    body = _lifecycle(echo_server)
    assert body["state"] == "quarantined" and body["reason"] == "Xid 79 on GPU 3"
    (done,) = body["actions"]
    assert done["status"] == "succeeded" and done["returncode"] == 0 and done["attempts"] == 1
    assert (
        done["output"]
        == "update NodeName=gpu-node-07 State=DRAIN Reason=fleetwatch: Xid 79 on GPU 3"
    )
    assert done["finished_at"] is not None and done["next_attempt_at"] is None


def test_the_lifecycle_path_and_its_history(echo_server: LiveServer) -> None:
    for state in ("quarantined", "remediating", "validating", "in_service"):
        assert _move(echo_server, state).status_code == 200, state
    body = _lifecycle(echo_server)
    assert body["state"] == "in_service" and body["since"] is not None
    path = [(t["from_state"], t["to_state"]) for t in reversed(body["transitions"])]
    assert path == [
        ("in_service", "quarantined"),
        ("quarantined", "remediating"),
        ("remediating", "validating"),
        ("validating", "in_service"),
    ]
    # Only leaving and entering service touch the scheduler.
    verbs = [(a["verb"], a["command"][-1]) for a in reversed(body["actions"])]
    assert verbs == [("drain", "Reason=fleetwatch: Xid 79 on GPU 3"), ("resume", "State=RESUME")]


def test_the_nodes_out_of_service_are_listed_and_leave_the_list_on_return(
    echo_server: LiveServer,
) -> None:
    listing = f"{echo_server.url}/api/v1/lifecycle"
    assert httpx.get(listing, timeout=10).json() == []
    assert _move(echo_server, "quarantined", actor="alice").status_code == 200

    (row,) = httpx.get(listing, timeout=10).json()
    assert (row["hostname"], row["state"], row["reason"], row["cause"]) == (
        "gpu-node-07.cluster.example",
        "quarantined",
        "Xid 79 on GPU 3",
        "person",
    )
    assert row["since"] is not None
    assert _move(echo_server, "in_service").status_code == 200
    assert httpx.get(listing, timeout=10).json() == []


@pytest.mark.parametrize(
    ("path", "to_state", "detail"),
    [
        ((), "in_service", "in service already"),
        ((), "remediating", "it can go to quarantined, not remediating"),
        (
            ("quarantined", "rma"),
            "in_service",
            "it can go to quarantined, validating, not in_service",
        ),
    ],
)
def test_a_transition_off_the_lifecycle_is_refused_and_changes_nothing(
    echo_server: LiveServer, path: tuple[str, ...], to_state: str, detail: str
) -> None:
    for state in path:
        assert _move(echo_server, state).status_code == 200
    before = _lifecycle(echo_server)
    refused = _move(echo_server, to_state)
    assert refused.status_code == 409
    assert detail in refused.json()["detail"]
    assert _lifecycle(echo_server) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"to_state": "drained"}, "to_state"),
        ({"reason": "   "}, "reason"),
        ({"reason": "x" * 1025}, "reason"),
        ({"reason": "bad\u0007bell"}, "reason"),
        ({"actor": ""}, "actor"),
        ({"actor": "a\nb"}, "actor"),
        ({"cause": "cosmic-ray"}, "cause"),
        ({"cause_ref": "r" * 65}, "cause_ref"),
        ({"dry_run": "perhaps"}, "dry_run"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    echo_server: LiveServer, body: dict[str, Any], field: str
) -> None:
    sent = {"to_state": "quarantined", "reason": "Xid 79", **body}
    response = httpx.post(
        f"{echo_server.url}/api/v1/nodes/gpu-node-07.cluster.example/lifecycle",
        json=sent,
        timeout=10,
    )
    assert response.status_code == 422, response.text
    assert any(err["loc"][-1] == field for err in response.json()["detail"]), response.text
    assert _lifecycle(echo_server)["state"] == "in_service"


def test_an_unknown_or_retired_node_is_refused(echo_server: LiveServer) -> None:
    unknown = httpx.post(
        f"{echo_server.url}/api/v1/nodes/nobody/lifecycle",
        json={"to_state": "quarantined", "reason": "x"},
        timeout=10,
    )
    assert unknown.status_code == 404
    assert httpx.get(f"{echo_server.url}/api/v1/nodes/nobody/lifecycle").status_code == 404
    retired = httpx.post(
        f"{echo_server.url}/api/v1/nodes/gpu-node-07.cluster.example/retire",
        json={"reason": "replaced"},
        timeout=10,
    )
    assert retired.status_code == 200
    refused = _move(echo_server, "quarantined")
    assert refused.status_code == 409 and "retired" in refused.json()["detail"]


def test_a_dry_run_logs_the_command_and_never_runs_it(echo_server: LiveServer, db_url: str) -> None:
    made = _move(echo_server, "quarantined", dry_run=True)
    (action,) = made.json()["actions"]
    assert action["status"] == "dry_run" and action["command"][0] == ECHO
    with session_factory(db_url) as factory:
        report = ActionWorker(factory).run_once()
    assert (report.succeeded, report.retried, report.failed) == (0, 0, 0)
    (kept,) = _lifecycle(echo_server)["actions"]
    assert kept["status"] == "dry_run" and kept["attempts"] == 0 and kept["returncode"] is None


def test_the_slurm_node_label_names_the_slurm_node(db_url: str, tmp_path: Path) -> None:
    live = LiveServer(make_settings(db_url, tmp_path, slurm_scontrol=ECHO))
    live.start()
    try:
        token = create_token(db_url, "n1")
        payload = batch("n1")
        payload["node"]["labels"] = {"slurm_node": "dgx-a100-001"}
        assert post_batch(live.url, token, payload).status_code == 200
        made = httpx.post(
            f"{live.url}/api/v1/nodes/n1/lifecycle",
            json={"to_state": "quarantined", "reason": "fan"},
            timeout=10,
        )
        assert made.json()["actions"][0]["command"][2] == "NodeName=dgx-a100-001"
    finally:
        live.stop()


def test_without_a_managed_scheduler_a_transition_logs_no_action(
    db_url: str, tmp_path: Path
) -> None:
    for live in _server(db_url, tmp_path, None):
        made = _move(live, "quarantined")
        assert made.status_code == 200 and made.json()["actions"] == []
        assert _lifecycle(live)["managed"] == []


def test_a_failing_command_is_retried_then_marked_failed_never_lost(
    db_url: str, tmp_path: Path
) -> None:
    for live in _server(db_url, tmp_path, FALSE):
        assert _move(live, "quarantined").status_code == 200
        with session_factory(db_url) as factory:
            worker = ActionWorker(factory)
            for attempt in range(1, MAX_ATTEMPTS + 1):
                report = worker.run_once()
                assert worker.run_once().retried == 0  # not due again before its backoff
                (action,) = _lifecycle(live)["actions"]
                assert action["attempts"] == attempt and action["returncode"] == 1
                if attempt < MAX_ATTEMPTS:
                    assert report.retried == 1 and action["status"] == "pending"
                    assert action["next_attempt_at"] > action["requested_at"]
                    with session_scope(factory) as session:
                        session.execute(update(NodeAction).values(next_attempt_at=utcnow()))
                else:
                    assert report.failed == 1 and action["status"] == "failed"
                    assert action["next_attempt_at"] is None
        assert _lifecycle(live)["state"] == "quarantined"


def test_a_missing_command_is_reported_as_such(db_url: str, tmp_path: Path) -> None:
    for live in _server(db_url, tmp_path, str(tmp_path / "no-scontrol")):
        assert _move(live, "quarantined").status_code == 200
        with session_factory(db_url) as factory:
            assert ActionWorker(factory).run_once().retried == 1
        (action,) = _lifecycle(live)["actions"]
        assert action["returncode"] is None and action["output"].endswith("no-scontrol: not found")


def test_a_later_transition_supersedes_the_pending_actions(
    echo_server: LiveServer, db_url: str
) -> None:
    """A drain waiting for its retry must not land after the resume asked since."""
    assert _move(echo_server, "quarantined").status_code == 200
    with session_factory(db_url) as factory:
        with session_scope(factory) as session:  # the drain is waiting for a retry
            session.execute(
                update(NodeAction).values(attempts=1, next_attempt_at=utcnow().replace(year=2100))
            )
        assert _move(echo_server, "in_service").status_code == 200
        report = ActionWorker(factory).run_once()
    assert (report.succeeded, report.retried) == (1, 0)
    resume, drain = _lifecycle(echo_server)["actions"]
    assert (drain["verb"], drain["status"]) == ("drain", "superseded")
    assert "superseded: the node's state changed again before it ran" in drain["output"]
    assert (resume["verb"], resume["status"]) == ("resume", "succeeded")
    # A dry run moves the state on too: it supersedes what was pending.
    assert _move(echo_server, "quarantined").status_code == 200
    assert _move(echo_server, "in_service", dry_run=True).status_code == 200
    statuses = [(a["verb"], a["status"]) for a in _lifecycle(echo_server)["actions"][:2]]
    assert statuses == [("resume", "dry_run"), ("drain", "superseded")]


def test_an_action_whose_runner_died_is_run_again_after_its_lease(
    echo_server: LiveServer, db_url: str
) -> None:
    assert _move(echo_server, "quarantined").status_code == 200
    with session_factory(db_url) as factory:
        with session_scope(factory) as session:  # claimed by a process that then died
            session.execute(update(NodeAction).values(status="running", next_attempt_at=utcnow()))
        assert ActionWorker(factory).run_once().succeeded == 1
    (action,) = _lifecycle(echo_server)["actions"]
    assert (action["status"], action["attempts"]) == ("succeeded", 1)


@pytest.mark.parametrize("label", ["ALL", "all", "fw-gpu-0[1-4]", "a,b", "x y", "-h"])
def test_a_slurm_node_label_that_is_not_one_node_is_never_run(
    db_url: str, tmp_path: Path, label: str
) -> None:
    live = LiveServer(make_settings(db_url, tmp_path, slurm_scontrol=ECHO))
    live.start()
    try:
        payload = batch("n1")
        payload["node"]["labels"] = {"slurm_node": label}
        assert post_batch(live.url, create_token(db_url, "n1"), payload).status_code == 200
        made = httpx.post(
            f"{live.url}/api/v1/nodes/n1/lifecycle",
            json={"to_state": "quarantined", "reason": "x"},
            timeout=10,
        ).json()
        (action,) = made["actions"]
        assert action["status"] == "failed" and action["attempts"] == 0
        assert "not one slurm node name" in action["output"]
        with session_factory(db_url) as factory:
            assert ActionWorker(factory).run_once() == RunReport()
    finally:
        live.stop()


def test_a_second_move_waits_for_the_first_and_is_refused(postgres_url: str) -> None:
    """Two moves of one node at once (two clicks, a person and automation): the second waits
    on the node row's lock until the first commits, then sees its state and is refused, never
    both applied (nor a 500 on the state row's key)."""
    from app.errors import Conflict
    from app.fleet import service as fleet_service
    from app.lifecycle import service as lifecycle
    from app.remediation.service import Backends

    backends = Backends(scontrol=ECHO)
    try:
        with session_factory(postgres_url) as factory:
            with session_scope(factory) as session:
                fleet_service.get_or_create_node(session, hostname="race-1")
            first = factory()
            node = fleet_service.get_node_by_hostname(first, hostname="race-1")
            lifecycle.transition(
                first,
                node=node,
                to_state="quarantined",
                reason="a",
                cause="person",
                actor="alice",
                backends=backends,
            )  # not committed yet: it holds the node row
            outcome: list[BaseException | None] = []

            def second() -> None:
                try:
                    with session_scope(factory) as session:
                        other = fleet_service.get_node_by_hostname(session, hostname="race-1")
                        lifecycle.transition(
                            session,
                            node=other,
                            to_state="quarantined",
                            reason="b",
                            cause="person",
                            actor="bob",
                            backends=backends,
                        )
                    outcome.append(None)
                except BaseException as exc:
                    outcome.append(exc)

            thread = threading.Thread(target=second)
            thread.start()
            thread.join(timeout=1.0)
            assert thread.is_alive(), "the second move must wait for the first"
            first.commit()
            first.close()
            thread.join(timeout=10)
            (result,) = outcome
            assert isinstance(result, Conflict) and "quarantined already" in str(result.detail)
            with session_scope(factory) as session:
                node = fleet_service.get_node_by_hostname(session, hostname="race-1")
                assert [t.actor for t in lifecycle.history(session, node.id)] == ["alice"]
    finally:
        wipe(postgres_url)


def test_an_action_that_failed_for_good_pages_and_can_be_retried(
    db_url: str, tmp_path: Path
) -> None:
    from app.alerts.rulefiles import DEFAULT_RULES_DIR, load_path
    from tests.factories import add_rules, evaluate_at, wipe_alerts

    for live in _server(db_url, tmp_path, FALSE):
        try:
            assert _move(live, "quarantined").status_code == 200
            with session_factory(db_url) as factory:
                worker = ActionWorker(factory)
                for _ in range(MAX_ATTEMPTS):
                    with session_scope(factory) as session:
                        session.execute(update(NodeAction).values(next_attempt_at=utcnow()))
                    worker.run_once()
            (failed,) = _lifecycle(live)["actions"]
            assert failed["status"] == "failed"
            (spec,) = [
                s
                for s, _ in load_path(DEFAULT_RULES_DIR, source_prefix="defaults")
                if s.name == "node-remediation-failed"
            ]
            add_rules(db_url, spec.document())
            evaluate_at(db_url, datetime.now(UTC))
            firing = httpx.get(f"{live.url}/api/v1/alerts", params={"state": "firing"}).json()
            assert [a["rule"] for a in firing] == ["node-remediation-failed"]
            assert firing[0]["labels"]["hostname"] == "gpu-node-07.cluster.example"

            retried = httpx.post(
                f"{live.url}/api/v1/actions/{failed['id']}/retry", json={"actor": "carol"}
            )
            assert retried.status_code == 200, retried.text
            again = retried.json()
            assert (again["status"], again["actor"], again["command"]) == (
                "pending",
                "carol",
                failed["command"],
            )
            assert again["output"] == f"retry of action {failed['id']}"
            twice = httpx.post(f"{live.url}/api/v1/actions/{failed['id']}/retry", json={})
            assert twice.status_code == 409 and "came after it" in twice.json()["detail"]
            not_failed = httpx.post(f"{live.url}/api/v1/actions/{again['id']}/retry", json={})
            assert not_failed.status_code == 409
            assert httpx.post(f"{live.url}/api/v1/actions/999999/retry", json={}).status_code == 404
        finally:
            wipe_alerts(db_url)

"""A page names the jobs its node's incident hit, in every channel kind: Slack (a "Jobs hit"
line, mrkdwn-escaped), Teams (a fact), Discord (a field), PagerDuty (``custom_details``),
the generic webhook and Alertmanager (the ``jobs_hit`` annotation); a notice without jobs is
unchanged. And the lines themselves, from the incident's captured jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.db import session_scope
from app.incidents.models import Incident
from app.notify.channels import alertmanager, discord, pagerduty, slack, teams, webhook
from app.notify.channels.base import ChannelConfig
from app.notify.notices import notice_of
from app.workloads import service as workloads
from app.workloads.models import IncidentJob, WorkloadCapture
from tests.app.test_notify_channels_common import bodies, make_group, make_notice
from tests.dbs import session_factory
from tests.factories import create_token, xid_batch

JOBS = (
    "slurm job 4242 llm-pretrain (alice, RUNNING, GPUs 0,1)",
    "slurm job 77 <eval> (bob, FAILED)",
)


def test_every_kind_shows_the_jobs_hit() -> None:
    group = make_group([make_notice(0, jobs_hit=JOBS)])
    [s] = bodies(slack.SlackKind().build(group, ChannelConfig(url="https://hooks.slack.com/x")))
    assert (
        "*Jobs hit:* slurm job 4242 llm-pretrain (alice, RUNNING, GPUs 0,1); "
        "slurm job 77 &lt;eval&gt; (bob, FAILED)\n"
    ) in s["blocks"][2]["text"]["text"]
    [t] = bodies(teams.TeamsKind().build(group, ChannelConfig(url="https://x.example/w")))
    facts = t["attachments"][0]["content"]["body"][2]["facts"]
    assert {"title": "Jobs hit", "value": "; ".join(JOBS)} in facts
    [d] = bodies(
        discord.DiscordKind().build(
            group, ChannelConfig(url="https://discord.com/api/webhooks/1/x")
        )
    )
    fields = {f["name"]: f["value"] for f in d["embeds"][0]["fields"]}
    assert "slurm job 4242 llm-pretrain" in fields["Jobs hit"]
    pd_config = ChannelConfig(url="", secret="R" * 32)
    [p] = bodies(pagerduty.PagerDutyKind().build(group, pd_config))
    assert p["payload"]["custom_details"]["jobs_hit"] == list(JOBS)
    without = make_group([make_notice(0)])
    [plain] = bodies(
        slack.SlackKind().build(without, ChannelConfig(url="https://hooks.slack.com/x"))
    )
    assert "Jobs hit" not in plain["blocks"][2]["text"]["text"]


def test_the_annotation_reaches_webhooks_and_alertmanager() -> None:
    payload = {
        "alert_id": 5,
        "fingerprint": "f",
        "rule_name": "gpu-lost",
        "status": "firing",
        "severity": "critical",
        "labels": {"alertname": "gpu-lost", "hostname": "n1"},
        "summary": "s",
        "description": "d",
        "starts_at": "2026-12-05T10:00:00+00:00",
        "jobs_hit": list(JOBS),
    }
    notice = notice_of(payload, external_url="https://fw.example", signer=None)
    assert notice.jobs_hit == JOBS
    assert notice.annotations["jobs_hit"] == "; ".join(JOBS)
    group = make_group([notice])
    [w] = bodies(webhook.WebhookKind().build(group, ChannelConfig(url="https://x.example/h")))
    assert w["alerts"][0]["annotations"]["jobs_hit"] == "; ".join(JOBS)
    [a] = bodies(
        alertmanager.AlertmanagerKind().build(group, ChannelConfig(url="https://am.example"))
    )
    assert a[0]["annotations"]["jobs_hit"] == "; ".join(JOBS)
    assert (
        "jobs_hit"
        not in notice_of(
            {**payload, "jobs_hit": None}, external_url="https://fw.example", signer=None
        ).annotations
    )


def test_the_lines_come_from_the_incidents_capture(db_url: str, tmp_path: Path) -> None:
    from tests.app.helpers import post_batch
    from tests.conftest import make_settings
    from tests.live_server import LiveServer

    live = LiveServer(make_settings(db_url, tmp_path))
    live.start()
    try:
        now = datetime.now(UTC)
        token = create_token(db_url, "jh1")
        assert post_batch(live.url, token, xid_batch("jh1", now, xid=79)).status_code == 200
    finally:
        live.stop()
    with session_factory(db_url) as factory, session_scope(factory) as session:
        assert workloads.jobs_hit_lines(session, hostname="jh1", at=now) is None  # not captured
        assert workloads.awaiting_capture(session, ["jh1", "x"], now=now, within_s=20) == {"jh1"}
        assert workloads.awaiting_capture(session, ["jh1"], now=now, within_s=0) == set()
        (incident,) = session.query(Incident).all()
        session.add(
            WorkloadCapture(incident_id=incident.id, captured_at=now, system="slurm", target="jh1")
        )
        session.flush()
        assert workloads.jobs_hit_lines(session, hostname="jh1", at=now) == ["none"]
        assert workloads.awaiting_capture(session, ["jh1"], now=now, within_s=20) == set()
        for i in range(7):
            session.add(
                IncidentJob(
                    incident_id=incident.id,
                    system="slurm",
                    job_id=str(100 + i),
                    user="u",
                    name=f"j{i}",
                    partition="p",
                    state="RUNNING",
                    gpu_indexes=[0] if i % 2 == 0 else [5],  # the Xid is on GPU 0
                )
            )
        session.flush()
        assert workloads.jobs_hit_lines(session, hostname="jh1", at=now) == [
            "slurm job 100 j0 (u, RUNNING, GPUs 0)",
            "slurm job 102 j2 (u, RUNNING, GPUs 0)",
            "slurm job 104 j4 (u, RUNNING, GPUs 0)",
            "slurm job 106 j6 (u, RUNNING, GPUs 0)",
        ]
        assert (
            workloads.jobs_hit_lines(session, hostname="jh1", at=now + timedelta(hours=2)) is None
        )
        assert workloads.jobs_hit_lines(session, hostname="other", at=now) is None

"""Fault: a node name with non-ASCII characters, through every way in and out.

Node names are DNS host names (RFC 1123: ASCII letters, digits, '.', '_', '-'; an
internationalised name travels in its punycode form, ``xn--…``), so a name such as ``узел-01``
must be refused with a message that names the field and the expected form wherever it can
enter (``fleetwatch token create``, the agent's ``--hostname``, the ingest API) and answered
with a 404 where it is looked up (API, pages, ``fleetwatch health --node``), never a 500.
Its punycode form must work end to end, with non-ASCII label values (``cluster=Zürich-北``,
``rack=стойка 7``) kept exactly through ingest, the API, the pages, ``/metrics`` and the
client CLI.

Prints one line per check: what was done, what came back, ok or not.

    python bench/faults/non_ascii_node.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.factories import batch  # noqa: E402
from tests.live_server import free_port  # noqa: E402
from tests.server_process import (  # noqa: E402
    ServerProcess,
    fresh_database,
    operator_token,
    summary,
)

UNICODE = "узел-01"
PUNYCODE = "xn--e1ajebf-01"
LABELS = {"cluster": "Zürich-北", "rack": "стойка 7"}
EXPECTED_FORM = "punycode"


@dataclass(frozen=True)
class Check:
    """One check: what was done, what came back, whether that is right."""

    what: str
    got: str
    ok: bool


def fleetwatch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The ``fleetwatch`` command line, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def agent_once(server_url: str, token: str, hostname: str) -> subprocess.CompletedProcess[str]:
    """``python -m agents --once`` on a simulated node with :data:`LABELS`."""
    labels = [arg for k, v in LABELS.items() for arg in ("--label", f"{k}={v}")]
    command = [sys.executable, "-m", "agents", "--hostname", hostname, "--server", server_url]
    command += ["--token", token, "--collector", "simulated", "--once", *labels]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def run_checks(db_url: str, server_url: str) -> list[Check]:
    """Every check against the server at ``server_url`` on ``db_url``, reading as an operator
    with an admin API token (access control on)."""
    api_token = operator_token(db_url)
    with httpx.Client(headers={"Authorization": f"Bearer {api_token}"}) as api:
        return _checks(db_url, server_url, api, api_token)


def _checks(db_url: str, server_url: str, api: httpx.Client, api_token: str) -> list[Check]:
    env = {
        "FLEETWATCH_DATABASE_URL": db_url,
        "FLEETWATCH_SERVER": server_url,
        "FLEETWATCH_API_TOKEN": api_token,
    }
    checks: list[Check] = []

    def add(what: str, got: str, ok: bool) -> None:
        checks.append(Check(what, " ".join(got.split())[:160], ok))

    made = fleetwatch("token", "create", UNICODE, env=env)
    add(
        f"fleetwatch token create {UNICODE}",
        f"exit {made.returncode}: {made.stderr.strip()}",
        made.returncode == 2 and EXPECTED_FORM in made.stderr and UNICODE in made.stderr,
    )
    refused = agent_once(server_url, "fwt_unused", UNICODE)
    add(
        f"fleetwatch-agent --hostname {UNICODE}",
        f"exit {refused.returncode}: {refused.stderr.strip().splitlines()[-1]}",
        refused.returncode == 2
        and "argument --hostname" in refused.stderr
        and EXPECTED_FORM in refused.stderr,
    )
    token = fleetwatch("token", "create", PUNYCODE, env=env)
    add(f"fleetwatch token create {PUNYCODE}", f"exit {token.returncode}", token.returncode == 0)
    key = token.stdout.strip()
    posted = api.post(
        f"{server_url}/api/v1/ingest",
        json=batch(UNICODE),
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    add(
        f"POST /api/v1/ingest as {UNICODE}",
        f"{posted.status_code} {posted.text}",
        posted.status_code == 422 and "hostname" in posted.text,
    )
    for path in (f"/api/v1/nodes/{UNICODE}", f"/api/v1/nodes/{quote(UNICODE)}/health"):
        got = api.get(f"{server_url}{path}", timeout=30)
        add(f"GET {path}", f"{got.status_code} {got.text}", got.status_code == 404)
    page = api.get(f"{server_url}/nodes/{UNICODE}", timeout=30)
    add(f"GET /nodes/{UNICODE} (page)", f"{page.status_code}", page.status_code == 404)
    health = fleetwatch("health", "--node", UNICODE, env=env)
    add(
        f"fleetwatch health --node {UNICODE}",
        f"exit {health.returncode}: {health.stdout.strip()} {health.stderr.strip()}",
        health.returncode == 4,
    )
    sent = agent_once(server_url, key, PUNYCODE)
    add(f"fleetwatch-agent --once as {PUNYCODE} with {LABELS}", f"exit {sent.returncode}",
        sent.returncode == 0)  # fmt: skip
    node = api.get(f"{server_url}/api/v1/nodes/{PUNYCODE}", timeout=30).json()
    add(
        "GET /api/v1/nodes/<punycode>: labels",
        str(node.get("labels")),
        node.get("labels") == LABELS,
    )
    for path in (f"/nodes/{PUNYCODE}", "/"):
        html = api.get(f"{server_url}{path}", timeout=30)
        shown = all(v in html.text for v in LABELS.values())
        add(f"GET {path} (page) shows the labels", f"{html.status_code} {shown}",
            html.status_code == 200 and shown)  # fmt: skip
    metrics = api.get(f"{server_url}/metrics", timeout=30)
    series = [
        s
        for family in text_string_to_metric_families(metrics.text)
        for s in family.samples
        if s.labels.get("Hostname") == PUNYCODE
    ]
    exact = bool(series) and all(
        s.labels.get("cluster") == LABELS["cluster"] and s.labels.get("rack") == LABELS["rack"]
        for s in series
    )
    add("/metrics parsed: the node's series carry the labels", f"{len(series)} series, {exact}",
        exact)  # fmt: skip
    listed = fleetwatch("nodes", "--label", f"cluster={LABELS['cluster']}", env=env)
    add(
        f"fleetwatch nodes --label cluster={LABELS['cluster']}",
        f"exit {listed.returncode}: {listed.stdout.strip()}",
        listed.returncode == 0 and PUNYCODE in listed.stdout,
    )
    healthy = fleetwatch("health", "--node", PUNYCODE, env=env)
    add(f"fleetwatch health --node {PUNYCODE}", f"exit {healthy.returncode}",
        healthy.returncode in (0, 1, 2))  # fmt: skip
    return checks


def main() -> int:
    with fresh_database() as url, tempfile.TemporaryDirectory(prefix="fw-ascii-") as tmp:
        server = ServerProcess(url, free_port(), Path(tmp) / "server.log")
        server.start()
        try:
            checks = run_checks(url, server.url)
        finally:
            server.stop()
    rows = [(f"{'ok ' if c.ok else 'BAD'} {c.what}", c.got) for c in checks]
    print(summary("a node name with non-ASCII characters", rows))
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

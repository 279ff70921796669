"""The Dockerfile and docker-compose.yml, parsed (no Docker daemon here): the server image runs
as the unprivileged user the Kubernetes manifests expect, exposes the port it listens on, runs
a command the command line has, and its HEALTHCHECK command, run as written against a live
server, passes while the server answers and fails when none does; compose migrates once, then
serves, then starts the fleet once the server is ready."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from app.migrate import upgrade
from tests.conftest import make_settings
from tests.deploy.commands import fleetwatch_error
from tests.deploy.dockerfile_stages import IMAGE_UID, ROOT, last, stages
from tests.live_server import LiveServer, free_port

SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]


def exec_form(value: str) -> list[str]:
    """A JSON-array (exec form) instruction value; shell forms are refused here on purpose:
    they would run under /bin/sh -c and miss SIGTERM."""
    parsed = json.loads(value)
    assert isinstance(parsed, list), value
    return [str(word) for word in parsed]


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for instruction, value in stage:
        if instruction == "ENV":
            pairs.update(dict(re.findall(r"(\w+)=(\S+)", value)))
    return pairs


def test_the_server_is_the_default_target_and_the_agent_a_stage_of_its_own() -> None:
    assert list(stages()) == ["agent", "server"]  # the last stage is what `docker build` makes


def test_the_server_image_runs_as_the_unprivileged_user_it_creates() -> None:
    server = stages()["server"]
    user = last(server, "USER")
    assert user == f"{IMAGE_UID}:{IMAGE_UID}"  # numeric: runAsNonRoot can check it
    creates = " ".join(value for name, value in server if name == "RUN")
    assert f"--uid {IMAGE_UID}" in creates
    assert f"--gid {IMAGE_UID}" in creates
    # Its data dir is its own.
    data_dir = env_of(server)["FLEETWATCH_DATA_DIR"]
    assert f"install -d -o {IMAGE_UID} -g {IMAGE_UID} -m 0750 {data_dir}" in creates


def test_the_server_image_listens_where_it_exposes_and_runs_a_real_command() -> None:
    server = stages()["server"]
    env = env_of(server)
    assert env["FLEETWATCH_HOST"] == "0.0.0.0"
    assert last(server, "EXPOSE") == env["FLEETWATCH_PORT"] == "8000"
    cmd = exec_form(last(server, "CMD") or "null")
    assert cmd[0] in SCRIPTS
    assert fleetwatch_error(cmd) is None
    # What the app reads beside its package (app.config.PROJECT_ROOT) is in the image.
    copied = {value.split()[0] for name, value in server if name == "COPY"}
    assert {"app", "agents", "migrations", "templates", "static", "runbooks"} <= copied


def test_the_agent_image_runs_the_agent() -> None:
    agent = stages()["agent"]
    entrypoint = exec_form(last(agent, "ENTRYPOINT") or "null")
    assert entrypoint == ["fleetwatch-agent"]
    assert entrypoint[0] in SCRIPTS
    copied = {value.split()[0] for name, value in agent if name == "COPY"}
    assert "agents" in copied
    assert "app" not in copied  # the base install: the agent without the server


def test_everything_copied_exists_and_is_not_ignored() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    for stage in stages().values():
        for name, value in stage:
            if name == "COPY":
                for source in value.split()[:-1]:
                    assert (ROOT / source).exists(), source
                    assert source not in ignored, source


def healthcheck_argv() -> list[str]:
    value = last(stages()["server"], "HEALTHCHECK") or ""
    options, _, command = value.partition("CMD")
    assert "--interval=" in options and "--timeout=" in options
    argv = exec_form(command.strip())
    assert argv[0] == "python"  # the image's interpreter (python:3.11-slim has no curl)
    return [sys.executable, *argv[1:]]


def test_the_healthcheck_passes_while_the_server_answers_and_fails_when_none_does(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'fleetwatch.db'}"
    upgrade(url)
    server = LiveServer(make_settings(url, tmp_path))
    server.start()
    try:
        up = subprocess.run(
            healthcheck_argv(),
            env={"FLEETWATCH_PORT": str(server.port)},
            capture_output=True,
            timeout=30,
        )
    finally:
        server.stop()
    assert up.returncode == 0, up.stderr
    down = subprocess.run(
        healthcheck_argv(),
        env={"FLEETWATCH_PORT": str(free_port())},
        capture_output=True,
        timeout=30,
    )
    assert down.returncode != 0


@pytest.fixture(scope="module")
def compose() -> dict[str, dict]:
    document = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    services: dict[str, dict] = document["services"]
    return services


def test_compose_migrates_once_then_serves_then_starts_the_fleet(compose: dict[str, dict]) -> None:
    assert compose["migrate"]["command"] == ["fleetwatch", "migrate"]
    assert compose["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert compose["server"]["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "migrate": {"condition": "service_completed_successfully"},
    }
    assert compose["fleet"]["depends_on"] == {"server": {"condition": "service_healthy"}}
    for service in compose.values():
        if "command" in service and service["command"][0] == "fleetwatch":
            assert fleetwatch_error(service["command"]) is None, service["command"]


def test_compose_waits_on_health_checks_that_exist(compose: dict[str, dict]) -> None:
    for service in compose.values():
        for needed, condition in service.get("depends_on", {}).items():
            if condition["condition"] == "service_healthy":
                assert compose[needed]["healthcheck"]["test"], needed
    # The fleet waits for readiness (database answering, schema migrated), not mere liveness.
    assert "/readyz" in " ".join(compose["server"]["healthcheck"]["test"])
    assert compose["postgres"]["healthcheck"]["test"][0] == "CMD-SHELL"


def test_compose_points_every_service_at_its_postgres(compose: dict[str, dict]) -> None:
    pg = compose["postgres"]["environment"]
    expected = (
        f"postgresql://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@postgres:5432/"
        f"{pg['POSTGRES_DB']}"
    )
    for name in ("migrate", "server", "fleet"):
        assert compose[name]["environment"]["FLEETWATCH_DATABASE_URL"] == expected, name
    assert compose["server"]["ports"] == ["8000:8000"]

"""The ``fleetwatch`` command line, run as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.factories import batch
from tests.live_server import live_server


def fleetwatch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m app ARGS`` and capture its output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=full_env,
        check=False,
    )


def test_migrate_then_token_create_gives_a_token_the_server_accepts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    migrated = fleetwatch("migrate", "--database-url", url)
    assert migrated.returncode == 0, migrated.stderr
    created = fleetwatch("token", "create", "gpu-node-7", "--database-url", url)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("fwt_") and len(token) > 40
    with live_server(make_settings(url, tmp_path)) as server:
        response = post_batch(server.url, token, batch("gpu-node-7"))
        assert response.status_code == 200
        revoked = fleetwatch("token", "revoke", "gpu-node-7", "--database-url", url)
        assert "revoked 1 token" in revoked.stdout
        assert post_batch(server.url, token, batch("gpu-node-7")).status_code == 401


def test_the_migrate_command_creates_the_embedded_database_in_the_data_dir(tmp_path: Path) -> None:
    result = fleetwatch(
        "migrate",
        env={"FLEETWATCH_DATA_DIR": str(tmp_path / "data"), "FLEETWATCH_DATABASE_URL": ""},
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "data" / "fleetwatch.db").is_file()


def test_a_bad_setting_exits_2_naming_it(tmp_path: Path) -> None:
    result = fleetwatch("migrate", env={"FLEETWATCH_STALE_AFTER_S": "soon"})
    assert result.returncode == 2
    assert "FLEETWATCH_STALE_AFTER_S" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_with_a_bad_list_setting_exits_2_naming_the_variable_and_the_form(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {"FLEETWATCH_NOTIFY_ALLOW_HOSTS": "127.0.0.1;10.0.0.0/8"}
    result = fleetwatch("serve", "--database-url", url, "--port", "1", env=env)
    assert result.returncode == 2
    assert (
        "FLEETWATCH_NOTIFY_ALLOW_HOSTS: '127.0.0.1;10.0.0.0/8' is neither a host name nor a CIDR;"
        " expected host names or CIDRs separated by commas (e.g. 127.0.0.1,10.0.0.0/8) or a JSON"
        " list, got '127.0.0.1;10.0.0.0/8'" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_serve_takes_a_plain_host_list_past_the_settings(tmp_path: Path) -> None:
    """Issue 14: ``FLEETWATCH_NOTIFY_ALLOW_HOSTS=127.0.0.1`` stopped start-up; now serve gets
    as far as the database (unmigrated here, so it stops there with its advice)."""
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    env = {"FLEETWATCH_NOTIFY_ALLOW_HOSTS": "127.0.0.1", "FLEETWATCH_ALERTS_ENABLED": "no"}
    result = fleetwatch("serve", "--database-url", url, "--port", "1", env=env)
    assert result.returncode == 2
    assert "invalid settings" not in result.stderr
    assert "run 'fleetwatch migrate'" in result.stderr


def test_a_bad_hostname_for_a_token_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    fleetwatch("migrate", "--database-url", url)
    result = fleetwatch("token", "create", "not a host!", "--database-url", url)
    assert result.returncode == 2
    assert "not a valid hostname" in result.stderr


def test_serving_an_unmigrated_database_fails_with_advice(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    result = fleetwatch("serve", "--database-url", url, "--port", "1")
    assert result.returncode == 2
    assert "run 'fleetwatch migrate'" in result.stderr
    assert "Traceback" not in result.stderr


def test_token_create_before_migrate_gives_advice_and_creates_no_database(tmp_path: Path) -> None:
    data = tmp_path / "fresh"
    result = fleetwatch("token", "create", "gpu-node-017", env={"FLEETWATCH_DATA_DIR": str(data)})
    assert result.returncode == 2
    assert "run 'fleetwatch migrate' first" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (data / "fleetwatch.db").exists()


@pytest.mark.parametrize(
    "args",
    [("migrate",), ("serve", "--migrate", "--port", "1"), ("serve", "--port", "1")],
    ids=["migrate", "serve --migrate", "serve"],
)
def test_an_unreachable_database_is_one_line_naming_it_not_a_traceback(
    args: tuple[str, ...],
) -> None:
    # What `kubectl logs job/fleetwatch-migrate` shows while Postgres is not up yet.
    url = "postgresql://fleetwatch:s3cret@127.0.0.1:1/fleetwatch"  # port 1: refused
    result = fleetwatch(*args, "--database-url", url)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        "fleetwatch: database postgresql://fleetwatch:***@127.0.0.1:1/fleetwatch cannot be "
        "opened (OperationalError: "
    )
    assert lines[0].endswith(
        "): check FLEETWATCH_DATABASE_URL (or --database-url) and that the database server is up"
    )


def test_a_non_ascii_hostname_for_a_token_is_refused_naming_its_dns_form(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    fleetwatch("migrate", "--database-url", url)
    result = fleetwatch("token", "create", "gpü-01", "--database-url", url)
    assert result.returncode == 2
    assert "use its DNS form 'xn--gp-01-lva'" in result.stderr

"""deploy/kubernetes/node-tokens.sh: every GPU node gets a working ingest token in the Secret,
keyed by node name; a second run keeps the tokens stored and makes one for a node that joined.

kubectl is the one stand-in (no API server here): a script that keeps the Secret in a file,
answers the node list, and runs ``exec … -- fleetwatch token create`` as the real command on a
real database, so the tokens checked are ones the server accepts."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.auth import service as auth_service
from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Node
from app.migrate import upgrade

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "kubernetes" / "node-tokens.sh"

FAKE_KUBECTL = """#!{python}
import base64, json, os, subprocess, sys
from pathlib import Path
import yaml

state = Path(os.environ["FAKE_KUBE_STATE"])
args = sys.argv[1:]
with (state / "calls").open("a") as log:
    log.write(json.dumps(args) + "\\n")
if args[:2] == ["-n", "fleetwatch"]:
    args = args[2:]
secret = state / "secret.yaml"
if args[:3] == ["get", "secret", "fleetwatch-agent-tokens"]:
    if not secret.exists():
        sys.exit("Error from server (NotFound): secrets not found")
    if len(args) > 3:
        data = yaml.safe_load(secret.read_text())["data"]
        sys.stdout.write("".join(f"{{k}} {{v}}\\n" for k, v in data.items()))
elif args[:2] == ["get", "nodes"]:
    assert args[2:4] == ["-l", "nvidia.com/gpu.present=true"], args
    sys.stdout.write((state / "nodes").read_text().strip())
elif args[:2] == ["exec", "deploy/fleetwatch-worker"]:
    assert args[2] == "--" and args[3] == "fleetwatch", args
    sys.exit(subprocess.run([os.environ["FLEETWATCH_BIN"], *args[4:]]).returncode)
elif args[:3] == ["create", "secret", "generic"]:
    name, source = args[3], Path(args[4].removeprefix("--from-file="))
    assert args[5:] == ["--dry-run=client", "-o", "yaml"], args
    data = {{p.name: base64.b64encode(p.read_bytes()).decode() for p in source.iterdir()}}
    doc = {{"apiVersion": "v1", "kind": "Secret", "metadata": {{"name": name}}, "data": data}}
    sys.stdout.write(yaml.safe_dump(doc))
elif args == ["apply", "-f", "-"]:
    secret.write_text(sys.stdin.read())
else:
    sys.exit(f"fake kubectl: unexpected {{args}}")
"""


def stored_tokens(state: Path) -> dict[str, str]:
    data = yaml.safe_load((state / "secret.yaml").read_text())["data"]
    return {key: base64.b64decode(value).decode() for key, value in data.items()}


def node_of(url: str, token: str) -> str:
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            node_id = auth_service.authenticate(session, authorization=f"Bearer {token}")
            return session.get_one(Node, node_id).hostname
    finally:
        engine.dispose()


def run_script(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def kube(tmp_path: Path) -> tuple[Path, dict[str, str], str]:
    url = f"sqlite:///{tmp_path / 'fleetwatch.db'}"
    upgrade(url)
    state = tmp_path / "state"
    state.mkdir()
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(FAKE_KUBECTL.format(python=sys.executable))
    kubectl.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "KUBECTL": str(kubectl),
        "FAKE_KUBE_STATE": str(state),
        "FLEETWATCH_BIN": str(Path(sys.executable).with_name("fleetwatch")),
        "FLEETWATCH_DATABASE_URL": url,
        "FLEETWATCH_DATA_DIR": str(tmp_path),
    }
    return state, env, url


def test_every_gpu_node_gets_a_working_token_and_keeps_it(
    kube: tuple[Path, dict[str, str], str],
) -> None:
    state, env, url = kube
    (state / "nodes").write_text("gpu-node-001 gpu-node-002")
    first = run_script(env)
    assert first.returncode == 0, first.stderr
    assert "node-tokens: 2 new token(s); 2 node(s) in secret/fleetwatch-agent-tokens" in (
        first.stdout
    )
    tokens = stored_tokens(state)
    assert sorted(tokens) == ["gpu-node-001", "gpu-node-002"]
    assert {node: node_of(url, token) for node, token in tokens.items()} == {
        "gpu-node-001": "gpu-node-001",
        "gpu-node-002": "gpu-node-002",
    }

    (state / "nodes").write_text("gpu-node-001 gpu-node-002 gpu-node-003")
    second = run_script(env)
    assert second.returncode == 0, second.stderr
    assert "node-tokens: 1 new token(s); 3 node(s) in secret/fleetwatch-agent-tokens" in (
        second.stdout
    )
    again = stored_tokens(state)
    assert {k: again[k] for k in tokens} == tokens  # the agents' tokens did not change
    assert node_of(url, again["gpu-node-003"]) == "gpu-node-003"


def test_no_matching_node_is_an_error_that_writes_nothing(
    kube: tuple[Path, dict[str, str], str],
) -> None:
    state, env, _ = kube
    (state / "nodes").write_text("")
    done = run_script(env)
    assert done.returncode == 1
    assert "no node matches the label selector nvidia.com/gpu.present=true" in done.stderr
    assert not (state / "secret.yaml").exists()

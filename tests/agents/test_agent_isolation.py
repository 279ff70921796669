"""The agent stays small: importing every module of ``agents`` pulls in none of the server's
dependencies (the base install has only the standard library and nvidia-ml-py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("fastapi", "sqlalchemy", "pydantic", "jinja2", "starlette", "app", "httpx", "requests")

PROBE = f"""
import importlib, json, pkgutil, sys
import agents
names = [m.name for m in pkgutil.walk_packages(agents.__path__, "agents.")]
for name in names:
    importlib.import_module(name)
loaded = sorted(m for m in {FORBIDDEN!r} if m in sys.modules)
print(json.dumps({{"modules": names, "loaded": loaded}}))
"""


def test_importing_every_agent_module_loads_no_server_dependency() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {"agents.agent", "agents.simfleet", "agents.simulated.collector"} <= set(
        report["modules"]
    )
    assert report["loaded"] == []

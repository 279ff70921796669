#!/usr/bin/env bash
# Build the node agent's Debian package with dpkg-deb: fleetwatch-agent_<version>_all.deb in
# OUT_DIR (default dist/). It holds the agent (agents/, pure Python), the nvidia-ml-py that
# $PYTHON's environment has installed (default python3; pure Python too), /usr/bin/
# fleetwatch-agent, the hardened systemd unit and the example environment file (a conffile).
# It needs the system's python3 >= 3.11 and nothing else (Debian 12, Ubuntu 24.04).
#
#   deploy/debian/build-agent-deb.sh [OUT_DIR]          PYTHON=.venv/bin/python to pick one
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
out=$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)
version=$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$root/pyproject.toml")

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/fleetwatch-agent
lib=$pkg/usr/lib/fleetwatch-agent
doc=$pkg/usr/share/doc/fleetwatch-agent
install -d -m 0755 "$pkg/DEBIAN" "$lib" "$doc" "$pkg/usr/bin" "$pkg/lib/systemd/system" \
    "$pkg/etc/fleetwatch-agent"

# The agent's package, without byte code (compiled on the target by postinst).
(cd "$root" && find agents -name '*.py' -print0 | xargs -0 tar -cf -) | tar -xf - -C "$lib"
# nvidia-ml-py: its module and metadata, from the environment of $PYTHON.
"$python" - "$lib" "$doc" <<'PY'
import importlib.metadata
import shutil
import sys
from pathlib import Path

lib, doc = Path(sys.argv[1]), Path(sys.argv[2])
dist = importlib.metadata.distribution("nvidia-ml-py")
for file in dist.files or []:
    source = Path(str(dist.locate_file(file)))
    if file.parts[0] == "pynvml.py" or file.parts[0].endswith(".dist-info"):
        if file.name == "RECORD":  # lists paths of the build machine's install
            continue
        target = lib / file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
metadata = dist.metadata
(doc / "nvidia-ml-py.txt").write_text(
    f"nvidia-ml-py {dist.version} ({metadata['License'] or 'BSD'}), bundled in "
    "/usr/lib/fleetwatch-agent\n"
)
PY
test -f "$lib/pynvml.py" || { echo "build-agent-deb: nvidia-ml-py is not installed for $python" >&2; exit 1; }

cat >"$pkg/usr/bin/fleetwatch-agent" <<'PY'
#!/usr/bin/python3
"""fleetwatch-agent as the Debian package installs it: the agent in ../lib/fleetwatch-agent."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib" / "fleetwatch-agent"))

from agents.main import main  # noqa: E402

sys.exit(main())
PY

install -m 0644 "$root/deploy/systemd/fleetwatch-agent.service" "$pkg/lib/systemd/system/"
install -m 0644 "$root/deploy/systemd/fleetwatch-agent.env" "$pkg/etc/fleetwatch-agent/agent.env"
install -m 0644 "$root/docs/deploy-systemd.md" "$doc/"
cat >"$doc/copyright" <<'TXT'
Fleetwatch node agent. License: Apache-2.0 (/usr/share/common-licenses/Apache-2.0).
Bundled: nvidia-ml-py (NVIDIA Corporation), BSD-3-Clause; see nvidia-ml-py.txt.
TXT

installed_kb=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
cat >"$pkg/DEBIAN/control" <<TXT
Package: fleetwatch-agent
Version: $version
Architecture: all
Maintainer: Fleetwatch developers <fleetwatch@localhost>
Section: admin
Priority: optional
Depends: python3 (>= 3.11)
Installed-Size: $installed_kb
Description: Fleetwatch node agent: GPU, kernel Xid, storage and network readings
 Samples the node's NVIDIA GPUs (NVML, else nvidia-smi), follows the kernel log for Xid
 events and reads storage, NFS and InfiniBand counters, and pushes them to a Fleetwatch
 server. Runs as the hardened systemd service fleetwatch-agent (not enabled on install: give
 it /etc/fleetwatch-agent/token and FLEETWATCH_SERVER in /etc/fleetwatch-agent/agent.env).
TXT
echo /etc/fleetwatch-agent/agent.env >"$pkg/DEBIAN/conffiles"

cat >"$pkg/DEBIAN/postinst" <<'SH'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    python3 -m compileall -q /usr/lib/fleetwatch-agent >/dev/null 2>&1 || true
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload >/dev/null 2>&1 || true
        if systemctl is-active --quiet fleetwatch-agent.service; then
            systemctl try-restart fleetwatch-agent.service || true
        fi
    fi
    if [ ! -f /etc/fleetwatch-agent/token ]; then
        echo "fleetwatch-agent: put this node's token in /etc/fleetwatch-agent/token (0600),"
        echo "set FLEETWATCH_SERVER in /etc/fleetwatch-agent/agent.env, then:"
        echo "  systemctl enable --now fleetwatch-agent"
    fi
fi
SH
cat >"$pkg/DEBIAN/prerm" <<'SH'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    systemctl disable --now fleetwatch-agent.service >/dev/null 2>&1 || true
fi
find /usr/lib/fleetwatch-agent -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null || true
SH
cat >"$pkg/DEBIAN/postrm" <<'SH'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
    rm -rf /var/lib/private/fleetwatch-agent /var/lib/fleetwatch-agent
fi
SH
find "$pkg" -type d -exec chmod 0755 {} +
find "$pkg" -type f -exec chmod 0644 {} +
chmod 0755 "$pkg/DEBIAN/postinst" "$pkg/DEBIAN/prerm" "$pkg/DEBIAN/postrm" \
    "$pkg/usr/bin/fleetwatch-agent"

deb="$out/fleetwatch-agent_${version}_all.deb"
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
echo "$deb"

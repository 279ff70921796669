# Fleetwatch images, two targets of one file (docs/deploy-docker.md):
#   docker build -t fleetwatch .                          the server (the last stage, default)
#   docker build --target agent -t fleetwatch-agent .     the node agent alone (nvidia-ml-py)
ARG PYTHON_IMAGE=python:3.11-slim

# The node agent: the base install (standard library and nvidia-ml-py). It runs as root on
# purpose: reading /dev/kmsg needs CAP_SYSLOG and the host's /proc of other users' processes
# (deploy/kubernetes/agent-daemonset.yaml). NVML and nvidia-smi come from the host's driver,
# mounted by the NVIDIA container runtime (NVIDIA_DRIVER_CAPABILITIES=utility).
FROM ${PYTHON_IMAGE} AS agent
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=utility
WORKDIR /opt/fleetwatch-agent
COPY pyproject.toml README.md ./
COPY agents ./agents
RUN pip install --no-cache-dir . && rm -rf /opt/fleetwatch-agent
WORKDIR /
USER 0:0
ENTRYPOINT ["fleetwatch-agent"]
CMD ["--help"]

# The server: API, pages, the scheduled jobs (`fleetwatch worker`) and the migrations
# (`fleetwatch migrate`). Installed in place (editable), because the app reads migrations/,
# templates/, static/ and runbooks/ beside its package. Runs as an unprivileged user.
FROM ${PYTHON_IMAGE} AS server
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 fleetwatch \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/fleetwatch \
        --shell /usr/sbin/nologin fleetwatch \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/fleetwatch
WORKDIR /opt/fleetwatch
COPY pyproject.toml README.md ./
COPY app ./app
COPY agents ./agents
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
COPY runbooks ./runbooks
RUN pip install --no-cache-dir -e '.[server]' && python -m compileall -q app agents migrations
ENV FLEETWATCH_HOST=0.0.0.0 FLEETWATCH_PORT=8000 FLEETWATCH_DATA_DIR=/var/lib/fleetwatch
USER 10001:10001
VOLUME ["/var/lib/fleetwatch"]
EXPOSE 8000
# Liveness only (/healthz never asks the database); orchestrators that route traffic should
# ask /readyz, which does (docs/deploy-docker.md).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('FLEETWATCH_PORT', '8000'), timeout=2)"]
CMD ["fleetwatch", "serve", "--migrate"]

# Fleetwatch server image (also runs the simulated fleet for docker-compose).
FROM python:3.11-slim
WORKDIR /opt/fleetwatch
COPY pyproject.toml README.md ./
COPY app ./app
COPY agents ./agents
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
COPY runbooks ./runbooks
RUN pip install --no-cache-dir -e '.[server]'
ENV FLEETWATCH_HOST=0.0.0.0 FLEETWATCH_PORT=8000 FLEETWATCH_DATA_DIR=/var/lib/fleetwatch
EXPOSE 8000
CMD ["fleetwatch", "serve", "--migrate"]

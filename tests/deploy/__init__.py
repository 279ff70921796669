"""Tests of ``deploy/``, the Dockerfile and docker-compose.yml: parsed and validated offline
(Kubernetes schemas, systemd's own verifier), with the commands they run checked against the
real command lines."""

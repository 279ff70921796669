"""The dcgm-exporter endpoints to scrape: ``FLEETWATCH_DCGM_ENDPOINTS`` (URLs) and the file named
by ``FLEETWATCH_DCGM_ENDPOINTS_FILE``.

The file is Prometheus's ``file_sd_configs`` form (the form a Kubernetes job or a
configuration-management run would write): a JSON or YAML list of ``{"targets": ["host:port",
…], "labels": {…}}`` groups. Labels starting with ``__`` are Prometheus's meta labels, of which
``__scheme__`` (default ``http``) and ``__metrics_path__`` (default ``/metrics``) are honoured;
``hostname`` names the node (where the exporter's ``Hostname`` label is a pod name, as it is in
Kubernetes without ``NODE_NAME``); the others become the node's labels. A target may also be a
whole URL. The file is read again before each round of scrapes, so a regenerated file needs no
restart.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

_LABEL_KEY = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: A node name the fleet takes (app.fleet.service.HOSTNAME_RE: RFC 1123 characters, ≤ 253).
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
MAX_TARGETS = 10_000
#: The endpoint table's URL column (app.dcgm.models.DcgmEndpoint.url).
MAX_URL_CHARS = 2048


class TargetsError(ValueError):
    """The endpoints file or setting cannot be read; the message names the file or entry."""


@dataclass(frozen=True)
class Target:
    """One endpoint: its URL, the node name it was given (or None: the exporter's ``Hostname``
    label names it) and the labels its node gets."""

    url: str
    hostname: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def check_url(url: str) -> str:
    """``url`` if it is an ``http(s)://host[:port]/…`` URL of at most :data:`MAX_URL_CHARS`.

    Raises:
        TargetsError: it is not.
    """
    if len(url) > MAX_URL_CHARS:
        raise TargetsError(f"{shown_url(url)[:64]!r}… is longer than {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
    except ValueError:  # an IPv6 address without its closing bracket
        raise TargetsError(f"{url!r} is not an http:// or https:// URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetsError(f"{shown_url(url)!r} is not an http:// or https:// URL")
    try:
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        raise TargetsError(f"{shown_url(url)!r} has a port that is not a number 0-65535") from None
    return url


def shown_url(url: str) -> str:
    """``url`` as it may be shown (API, page, log, event messages): a password replaced by
    ``***`` (``http://user:***@host:9400/metrics``), as SQLAlchemy shows a database URL."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def hide_password(text: str, url: str) -> str:
    """``text`` (an error or log line about ``url``) with ``url``'s password replaced."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return text
    return text.replace(url, shown_url(url)).replace(password, "***") if password else text


def from_urls(urls: list[str]) -> list[Target]:
    """Targets for the URLs of ``FLEETWATCH_DCGM_ENDPOINTS``.

    Raises:
        TargetsError: an entry is not an http(s) URL.
    """
    return [Target(url=check_url(u)) for u in urls]


def read_file(path: Path) -> list[Target]:
    """The targets of a file_sd-style JSON or YAML file.

    Raises:
        TargetsError: the file cannot be read, is neither JSON nor YAML, or an entry has the
            wrong shape; the message names the file and the entry.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TargetsError(f"{path}: cannot be read ({exc})") from None
    try:
        document = json.loads(text) if text.lstrip().startswith("[") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise TargetsError(f"{path}: neither JSON nor YAML ({exc})") from None
    if document is None:
        return []
    if not isinstance(document, list):
        raise TargetsError(f"{path}: expected a list of {{targets: [...], labels: {{...}}}} groups")
    found: list[Target] = []
    for at, group in enumerate(document, start=1):
        found.extend(_group(group, where=f"{path}: group {at}"))
    if len(found) > MAX_TARGETS:
        raise TargetsError(f"{path}: {len(found)} targets, at most {MAX_TARGETS}")
    return found


def _group(group: Any, *, where: str) -> list[Target]:
    if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
        raise TargetsError(f"{where}: expected {{targets: [host:port, ...], labels: {{...}}}}")
    labels = group.get("labels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise TargetsError(f"{where}: labels must map names to text")
    scheme = labels.get("__scheme__", "http")
    path = labels.get("__metrics_path__", "/metrics")
    hostname = labels.get("hostname") or None
    if hostname is not None and not _HOSTNAME.match(hostname):
        raise TargetsError(f"{where}: hostname {hostname!r} is not a host name")
    node_labels = {}
    for key, value in labels.items():
        if key.startswith("__") or key == "hostname":
            continue
        if not _LABEL_KEY.match(key) or len(value) > 256:
            raise TargetsError(
                f"{where}: label {key!r} must be lower-case letters, digits and _ "
                "(at most 63) with a value of at most 256 characters"
            )
        node_labels[key] = value
    targets = []
    for entry in group["targets"]:
        if not isinstance(entry, str) or not entry:
            raise TargetsError(f"{where}: a target must be host:port or a URL, got {entry!r}")
        url = entry if "://" in entry else f"{scheme}://{entry}{path}"
        try:
            check_url(url)
        except TargetsError as exc:
            raise TargetsError(f"{where}: {exc}") from None
        targets.append(Target(url=url, hostname=hostname, labels=node_labels))
    return targets


def merge(*lists: list[Target]) -> list[Target]:
    """The targets of several sources, the first of each URL kept."""
    seen: dict[str, Target] = {}
    for targets in lists:
        for target in targets:
            seen.setdefault(target.url, target)
    return list(seen.values())

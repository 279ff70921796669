"""Server settings, read once at start-up and validated before anything listens.

Sources, highest priority first: keyword arguments, ``FLEETWATCH_*`` environment variables, the
TOML file named by ``FLEETWATCH_CONFIG_FILE`` (keys without the prefix, e.g. ``database_url``), then
the defaults below.
"""

from __future__ import annotations

import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from app import config_values

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _default_data_dir() -> Path:
    """Where the embedded SQLite database lives when no URL is given: ``$XDG_DATA_HOME/fleetwatch``
    or ``~/.local/share/fleetwatch``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "fleetwatch"


class SettingsError(Exception):
    """A setting has a value the server cannot start with; the message names the setting."""


class Settings(BaseSettings):
    """All server settings. Each field is ``FLEETWATCH_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(
        env_prefix="FLEETWATCH_", extra="forbid", validate_default=True
    )

    data_dir: Path = Field(default_factory=_default_data_dir)
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: SQLite file fleetwatch.db in data_dir"
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    ingest_max_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, le=1024**3)
    stale_after_s: float = Field(
        default=120.0, gt=0, le=7 * 86400, description="freshness window of a node"
    )
    future_tolerance_s: float = Field(default=300.0, ge=0, le=86400)
    retention_days: float = Field(
        default=30.0, gt=0, le=3650, description="events and batch ids older than this are pruned"
    )
    raw_retention_days: float = Field(
        default=7.0,
        gt=0,
        le=3650,
        description=(
            "raw samples and their blocks older than this are pruned (older ranges are charted "
            "from the 1-minute and 1-hour rollups); default: 7, or retention_days where only "
            "that is set"
        ),
    )
    prune_interval_s: float = Field(default=3600.0, ge=1, le=86400)
    job_drain_s: float = Field(
        default=20.0,
        ge=0,
        le=600,
        description=(
            "at a stop, longest wait for the scheduled jobs then running (keep it under the "
            "supervisor's stop timeout: docs/reliability.md)"
        ),
    )
    rollup_interval_s: float = Field(default=60.0, ge=10, le=600, description="rollup job period")
    rollup_lookback_s: float = Field(
        default=900.0, ge=120, le=86400, description="host-sample span each rollup run recomputes"
    )
    compact_after_s: float = Field(
        default=7200.0,
        ge=3600,
        le=90 * 86400,
        description="GPU, NVLink and host samples older than this are packed into blocks",
    )
    compact_interval_s: float = Field(default=300.0, ge=10, le=86400)
    compact_minutes_after_days: float = Field(
        default=7.0,
        ge=1,
        le=3650,
        description="GPU 1-minute rollups older than this are packed into day blocks",
    )
    compact_host_minutes_after_days: float = Field(
        default=1.0,
        ge=1,
        le=3650,
        description="disk, NFS and IB port 1-minute rollups older than this are packed by day",
    )
    rollup_minute_retention_days: float = Field(default=90.0, gt=0, le=3650)
    rollup_hour_retention_days: float = Field(default=1095.0, gt=0, le=36500)
    log_level: str = "info"
    health_xid_unhealthy: Annotated[list[int] | None, NoDecode] = Field(
        default=None, description="Xids that make a GPU unhealthy (48,79 or JSON); default: table"
    )
    health_xid_degraded: Annotated[list[int] | None, NoDecode] = Field(
        default=None, description="Xids that make a GPU degraded (48,79 or JSON); default: table"
    )
    health_xid_ignored: Annotated[list[int] | None, NoDecode] = Field(
        default=None, description="application Xids that never change health; default: table"
    )
    health_event_window_s: float = Field(default=86400.0, gt=0, le=90 * 86400)
    health_throttle_window_s: float = Field(default=60.0, gt=0, le=86400)
    health_throttle_min_fraction: float = Field(default=0.8, gt=0, le=1)
    health_disk_wait_s: float = Field(default=0.05, gt=0, le=3600)
    health_nfs_rtt_s: float = Field(default=0.1, gt=0, le=3600)
    health_escalate_after: int = Field(
        default=2,
        ge=1,
        le=100,
        description="earlier bursts of one finding on one GPU that escalate its repair to "
        "hardware inspection",
    )
    slurm_scontrol: str | None = Field(
        default=None,
        description="path of Slurm's scontrol: quarantining a node drains it in Slurm and "
        "returning it resumes it (unset: Slurm is not managed)",
    )
    kubeconfig: str | None = Field(
        default=None,
        description="a kubeconfig file, or 'in-cluster': quarantining a node cordons and "
        "drains it in Kubernetes and returning it uncordons it (unset: not managed)",
    )
    mirror_cordons: bool = Field(
        default=False,
        description="where Slurm and Kubernetes are both managed: drain in Slurm the nodes "
        "cordoned in Kubernetes and cordon the nodes drained in Slurm (docs/remediation.md)",
    )
    remediation_hook: str | None = Field(
        default=None,
        description="a command line run when a node enters remediating (a BMC power cycle, "
        "a GPU reset); placeholders {hostname}, {slurm_node}, {k8s_node}, {reason}, {actor} "
        "(docs/remediation.md)",
    )
    action_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="longest wait for one scheduler command"
    )
    action_worker_interval_s: float = Field(
        default=5.0, ge=0.1, le=3600, description="how often pending actions are retried"
    )
    automation_breaker_max_nodes: int = Field(
        default=5,
        ge=1,
        le=100_000,
        description="automatic quarantines within the breaker window past which the circuit "
        "breaker stops automation",
    )
    automation_breaker_max_pct: float = Field(
        default=10.0,
        gt=0,
        le=100,
        description="share of a node group automatically quarantined within the window past "
        "which the breaker trips, percent",
    )
    automation_breaker_window_s: float = Field(default=3600.0, gt=0, le=30 * 86400)
    automation_breaker_group_label: str = Field(
        default="cluster",
        min_length=1,
        max_length=128,
        description="the node label whose value makes a node group for the breaker",
    )
    incident_quiet_s: float = Field(
        default=180.0,
        ge=1,
        le=86400,
        description="a node's fault events closer than this are one incident; it closes "
        "after this long without one",
    )
    incident_max_s: float = Field(
        default=3600.0,
        ge=60,
        le=7 * 86400,
        description="an incident (and an escalation burst) spans at most this long: a storm "
        "that never pauses is a new incident after it, so repeats are counted and escalate",
    )
    health_escalation_window_s: float = Field(
        default=7 * 86400.0,
        gt=0,
        le=90 * 86400,
        description="how far back a finding's bursts are counted for escalation",
    )
    health_refresh_interval_s: float = Field(
        default=2.0,
        ge=0.1,
        le=3600,
        description="longest wait before a node's new data is evaluated into the stored health",
    )
    drift_interval_s: float = Field(
        default=15.0, ge=1, le=3600, description="seconds between checks for topology drift work"
    )
    drift_max_age_s: float = Field(
        default=60.0,
        ge=5,
        le=86400,
        description="drift is recomputed at least this often (NVLink/NIC readings move)",
    )
    grid_collapse_above_nodes: int = Field(
        default=1000,
        ge=0,
        le=1_000_000,
        description="above this many nodes the health grid sums up all-healthy groups in a line",
    )
    health_recheck_s: float = Field(
        default=60.0,
        ge=1,
        le=86400,
        description="a node with no new data is evaluated again after this (windows slide)",
    )
    alerts_enabled: bool = Field(default=True, description="run the alert rule evaluator")
    alert_eval_interval_s: float = Field(
        default=10.0, ge=1, le=3600, description="seconds between alert rule evaluations"
    )
    alert_wake_debounce_s: float = Field(
        default=0.1,
        ge=0,
        le=10,
        description="after a batch with an event or GPU state change is stored, evaluate the "
        "event-driven rules this many seconds later (batches meanwhile are evaluated together)",
    )
    runbooks_dir: Path = Field(
        default=PROJECT_ROOT / "runbooks",
        description="folder of Markdown runbooks (<name>.md); edits in the UI override them",
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description="key for webhook URLs at rest and signed ack links; default: a key file "
        "created 0600 in data_dir",
    )
    external_url: str | None = Field(
        default=None, description="this server's base URL in notification links"
    )
    notify_enabled: bool = Field(default=True, description="run the notification worker")
    notify_worker_interval_s: float = Field(default=1.0, ge=0.1, le=60)
    notify_timeout_s: float = Field(default=10.0, gt=0, le=120)
    notify_deadline_s: float = Field(default=3600.0, ge=1, le=7 * 86400)
    notify_backoff_base_s: float = Field(default=1.0, gt=0, le=3600)
    notify_backoff_cap_s: float = Field(default=300.0, gt=0, le=86400)
    notify_allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="hosts or CIDRs that webhooks may reach although loopback/link-local "
        "(127.0.0.1,10.0.0.0/8 or JSON)",
    )
    notify_ack_link_ttl_s: float = Field(default=86400.0, ge=60, le=30 * 86400)
    notify_rate_limits: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="pace per destination by channel kind, e.g. slack=1/1s,discord=5/2s,"
        "webhook=off or the JSON object; over the kinds' defaults (docs/notifications.md)",
    )
    notify_max_pace_wait_s: float = Field(default=10.0, ge=0, le=300)
    notify_last_try_margin_s: float = Field(default=1.0, ge=0, le=3600)
    anonymous_role: Literal["none", "viewer"] = Field(
        default="none",
        description="what a request without credentials may do: none (log in first) or viewer "
        "(read-only wall displays; every change still needs a login or token)",
    )
    session_ttl_s: float = Field(
        default=12 * 3600.0, ge=60, le=30 * 86400, description="a login session's lifetime"
    )
    session_idle_s: float = Field(
        default=8 * 3600.0,
        ge=60,
        le=30 * 86400,
        description="a login session ends after this long without a request (a page left open "
        "keeps it alive: its panels refresh)",
    )
    audit_retention_days: float = Field(
        default=400.0, gt=0, le=36500, description="audit events older than this are pruned"
    )
    login_max_failures_per_user: int = Field(default=5, ge=1, le=1000)
    login_max_failures_per_address: int = Field(default=20, ge=1, le=100000)
    login_failure_window_s: float = Field(
        default=900.0, ge=1, le=86400, description="window of the failed-login limits"
    )
    oidc_issuer: str | None = Field(
        default=None,
        description="OpenID Connect issuer URL for single sign-on (discovery at "
        "ISSUER/.well-known/openid-configuration); unset: local logins only",
    )
    oidc_client_id: str | None = Field(default=None, description="this server's OIDC client id")
    oidc_client_secret: SecretStr | None = Field(default=None, description="its client secret")
    oidc_username_claim: str = Field(
        default="preferred_username", description="ID-token claim naming the user (then email)"
    )
    oidc_groups_claim: str = Field(default="groups", description="ID-token claim of groups")
    oidc_group_roles: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="group=role or group=role:team, e.g. sre=admin,gpu-oncall=responder:infra "
        "(or JSON); the highest role wins, teams add up; a user in no mapped group is refused",
    )
    metrics_node_labels: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["cluster", "ib_pod", "rack", "nvlink_domain"],
        description="node labels added to each GPU series of /metrics (cluster,rack or JSON, "
        "at most 16; docs/metrics.md)",
    )

    dcgm_endpoints: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="dcgm-exporter /metrics URLs to scrape (pull mode, docs/dcgm-pull.md), "
        "separated by commas or a JSON list",
    )
    dcgm_endpoints_file: Path | None = Field(
        default=None,
        description="a Prometheus file_sd-style JSON or YAML file of dcgm-exporter targets, "
        "read again before each round of scrapes (docs/dcgm-pull.md)",
    )
    dcgm_scrape_interval_s: float = Field(default=30.0, ge=1, le=3600)
    dcgm_scrape_timeout_s: float = Field(default=10.0, gt=0, le=120)
    dcgm_scrape_concurrency: int = Field(default=16, ge=1, le=256)

    # Environment variables and config files hold what a person types: plain lists, key=value
    # pairs and yes/no as well as JSON (app.config_values).
    @field_validator(
        "health_xid_unhealthy", "health_xid_degraded", "health_xid_ignored", mode="before"
    )
    @classmethod
    def _read_xids(cls, value: Any) -> Any:
        return config_values.plain_ints(value)

    @field_validator("notify_allow_hosts", mode="before")
    @classmethod
    def _read_hosts(cls, value: Any) -> Any:
        return config_values.plain_list(value, blank=[])

    @field_validator("metrics_node_labels", mode="before")
    @classmethod
    def _read_metrics_labels(cls, value: Any) -> Any:
        default = cls.model_fields["metrics_node_labels"].get_default(call_default_factory=True)
        return config_values.plain_list(value, blank=default)

    @field_validator("dcgm_endpoints", mode="before")
    @classmethod
    def _read_dcgm_endpoints(cls, value: Any) -> Any:
        return config_values.plain_list(value, blank=[])

    @field_validator("dcgm_endpoints_file", mode="before")
    @classmethod
    def _blank_file_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("dcgm_endpoints")
    @classmethod
    def _check_dcgm_endpoints(cls, value: list[str]) -> list[str]:
        from app.dcgm.targets import TargetsError, check_url

        try:
            return [check_url(url) for url in value]
        except TargetsError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("anonymous_role", mode="before")
    @classmethod
    def _check_anonymous_role(cls, value: Any) -> Any:
        text = str(value).strip().lower()
        if text not in ("none", "viewer"):
            raise ValueError(
                "none or viewer (anonymous access is read-only at most: any change needs a "
                "login or an API token)"
            )
        return text

    @field_validator("oidc_group_roles", mode="before")
    @classmethod
    def _read_group_roles(cls, value: Any) -> Any:
        return config_values.plain_map(value, shape="group=role[:team]")

    @field_validator("oidc_group_roles")
    @classmethod
    def _check_group_roles(cls, value: dict[str, str]) -> dict[str, str]:
        from app.access.oidc import parse_grant

        for group, grant in value.items():
            try:
                parse_grant(grant)
            except ValueError as exc:
                raise ValueError(f"{group}: {exc}") from None
        return value

    @field_validator("notify_rate_limits", mode="before")
    @classmethod
    def _read_paces(cls, value: Any) -> Any:
        return config_values.plain_map(value, shape="kind=pace")

    @field_validator("alerts_enabled", "notify_enabled", "mirror_cordons", mode="before")
    @classmethod
    def _read_bool(cls, value: Any) -> Any:
        return config_values.plain_bool(value)

    @field_validator("database_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(value)
        except ArgumentError as exc:
            raise ValueError(f"not a database URL: {exc}") from None
        if url.get_backend_name() not in ("sqlite", "postgresql"):
            raise ValueError("only sqlite:// and postgresql:// URLs are supported")
        return value

    @field_validator("notify_rate_limits")
    @classmethod
    def _check_rate_limits(cls, value: dict[str, str]) -> dict[str, str]:
        from app.notify.channels.registry import KINDS
        from app.notify.pacing import parse_pace

        for kind, pace in value.items():
            if kind not in KINDS:
                raise ValueError(f"{kind!r} is not a channel kind ({', '.join(sorted(KINDS))})")
            try:
                parse_pace(pace)
            except ValueError as exc:
                raise ValueError(f"{kind}: {exc}") from None
        return value

    @field_validator("metrics_node_labels")
    @classmethod
    def _check_metrics_node_labels(cls, value: list[str]) -> list[str]:
        from app.exporter.labels import check_allow_list

        return check_allow_list(value)

    @field_validator("notify_allow_hosts")
    @classmethod
    def _check_allow_hosts(cls, value: list[str]) -> list[str]:
        import ipaddress
        import re

        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", entry):
                    raise ValueError(f"{entry!r} is neither a host name nor a CIDR") from None
        return [e.lower() for e in value]

    @field_validator("slurm_scontrol", "kubeconfig", "remediation_hook", mode="before")
    @classmethod
    def _blank_is_unset(cls, v: Any) -> Any:
        # FLEETWATCH_SLURM_SCONTROL= (empty) means "not managed", not a command named "".
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("remediation_hook")
    @classmethod
    def _check_hook(cls, value: str | None) -> str | None:
        if value is not None:
            from app.remediation import hook

            hook.parse(value)
        return value

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        if value.lower() not in ("critical", "error", "warning", "info", "debug"):
            raise ValueError("must be one of critical, error, warning, info, debug")
        return value.lower()

    @field_validator("health_xid_unhealthy", "health_xid_degraded", "health_xid_ignored")
    @classmethod
    def _check_xids(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(not 0 <= x < 2**31 for x in value):
            raise ValueError("Xids are integers from 0 to 2**31 - 1")
        return value

    @model_validator(mode="after")
    def _raw_retention_follows_an_explicit_retention(self) -> Settings:
        # Before raw_retention_days existed, retention_days pruned the raw samples too: a
        # deployment that set it keeps its samples that long until it sets the new one.
        given = self.model_fields_set
        if "raw_retention_days" not in given and "retention_days" in given:
            self.raw_retention_days = self.retention_days
        return self

    @model_validator(mode="after")
    def _raw_retention_covers_the_health_windows(self) -> Settings:
        # Health reads raw readings over these windows (an IB port counts as down only with an
        # ACTIVE reading earlier in the event window): a shorter raw retention would weaken it
        # without a word, a port down longer than the retention no longer counting.
        kept_s = self.raw_retention_days * 86400
        for name in ("health_event_window_s", "health_throttle_window_s"):
            window_s = getattr(self, name)
            if kept_s < window_s:
                raise ValueError(
                    f"FLEETWATCH_RAW_RETENTION_DAYS ({self.raw_retention_days:g} days) is shorter"
                    f" than FLEETWATCH_{name.upper()} ({window_s:g} s), which health reads raw"
                    f" readings over: keep raw samples at least {window_s / 86400:g} days or"
                    " shorten the window"
                )
        return self

    @model_validator(mode="after")
    def _retention_covers_the_escalation_window(self) -> Settings:
        # The escalation ladder counts a finding's bursts in the stored events: events pruned
        # sooner would quietly shorten the window.
        if self.retention_days * 86400 < self.health_escalation_window_s:
            raise ValueError(
                f"FLEETWATCH_RETENTION_DAYS ({self.retention_days:g} days) is shorter than"
                f" FLEETWATCH_HEALTH_ESCALATION_WINDOW_S ({self.health_escalation_window_s:g} s),"
                " over which repeated faults are counted from the stored events: keep events at"
                f" least {self.health_escalation_window_s / 86400:g} days or shorten the window"
            )
        return self

    @model_validator(mode="after")
    def _check_incident_span(self) -> Settings:
        if self.incident_max_s < self.incident_quiet_s:
            raise ValueError(
                f"FLEETWATCH_INCIDENT_MAX_S ({self.incident_max_s:g} s) is shorter than"
                f" FLEETWATCH_INCIDENT_QUIET_S ({self.incident_quiet_s:g} s): an incident must"
                " be allowed to last at least one quiet period"
            )
        return self

    @model_validator(mode="after")
    def _check_xid_lists_disjoint(self) -> Settings:
        lists = {
            "unhealthy": self.health_xid_unhealthy,
            "degraded": self.health_xid_degraded,
            "ignored": self.health_xid_ignored,
        }
        given = [(name, set(xids)) for name, xids in lists.items() if xids is not None]
        for i, (name, xids) in enumerate(given):
            for other, other_xids in given[i + 1 :]:
                if both := sorted(xids & other_xids):
                    raise ValueError(f"Xids {both} are in both health_xid_{name} and _{other}")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Environment over the optional TOML file (``FLEETWATCH_CONFIG_FILE``)."""
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("FLEETWATCH_CONFIG_FILE")
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=config_file))
        return tuple(sources)

    @property
    def drift_stale_after_s(self) -> float:
        """Stored drift older than this is not served (computed on read instead): three
        recomputation periods, so a stopped job never shows an old answer silently."""
        return 3 * max(self.drift_max_age_s, self.drift_interval_s)

    @property
    def effective_database_url(self) -> str:
        """The URL in use: ``database_url``, else ``sqlite:///<data_dir>/fleetwatch.db``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'fleetwatch.db'}"


def load_settings(**overrides: Any) -> Settings:
    """Build and validate the settings.

    Raises:
        SettingsError: with one line per bad setting, naming it as its environment variable, the
            form it expects and the value given (:func:`app.config_values.error_line`).
    """
    config_file = os.environ.get("FLEETWATCH_CONFIG_FILE")
    if config_file and not Path(config_file).is_file():
        raise SettingsError(
            f"FLEETWATCH_CONFIG_FILE: no such file: expected the path of a TOML file of "
            f"settings, got {config_file!r}"
        )
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raw = {**_environment(), **overrides}
        lines = [
            config_values.error_line(err, fields=Settings.model_fields, raw=raw)
            for err in exc.errors()
        ]
        raise SettingsError("invalid settings:\n  " + "\n  ".join(lines)) from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(
            f"FLEETWATCH_CONFIG_FILE: {config_file} is not valid TOML ({exc}): expected a TOML "
            "file of settings, e.g. port = 8000"
        ) from None
    except ValueError as exc:
        raise SettingsError(f"invalid settings: {exc}") from None


def _environment() -> dict[str, str]:
    """The ``FLEETWATCH_*`` variables by setting name (read without regard to case, as
    pydantic-settings reads them), for error messages."""
    prefix = "FLEETWATCH_"
    return {
        key[len(prefix) :].lower(): value
        for key, value in os.environ.items()
        if key.upper().startswith(prefix)
    }


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (cached after the first successful load)."""
    return load_settings()

"""The one access policy: every route (method + path template) and who may call it.

:data:`POLICY` is looked up by :mod:`app.access.middleware` for every request, after matching
the request to its route; a route missing here is refused with 403 (and fails
``tests/app/test_access_policy.py``, which walks ``app.routes``). Decisions:

* :class:`Public`: no credentials (login page, health check, static files, signed ack links).
* :class:`AgentToken`: a node's agent token, checked by the endpoint (it writes only its node).
* :class:`EnrollmentToken`: an enrollment token, checked by the endpoint.
* :class:`Need`: at least ``role``; with ``team_of`` the object's owning team (asked of the
  owner's service, :mod:`app.access.ownership`) must be one of the caller's teams, unless the
  object has no owner or the caller is an admin or acts for every team.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.access import ownership
from app.access.roles import Role

TeamOf = Callable[[Session, Mapping[str, str]], str | None]


@dataclass(frozen=True)
class Public:
    """Anyone. ``audit``: record unsafe calls (the ack links act on alerts)."""

    audit: bool = False


@dataclass(frozen=True)
class AgentToken:
    """A node's agent token; the endpoint checks it and which node it may write."""


@dataclass(frozen=True)
class EnrollmentToken:
    """An enrollment token, checked by the endpoint (a new node gets its own agent token)."""


@dataclass(frozen=True)
class Need:
    """At least ``role`` (and the object's team via ``team_of``); ``audit``: record unsafe
    calls (off for read-only POSTs such as rule previews)."""

    role: Role
    team_of: TeamOf | None = None
    audit: bool = True


Decision = Public | AgentToken | EnrollmentToken | Need

PUBLIC = Public()
VIEW = Need(Role.viewer)
RESPOND = Need(Role.responder)
EDIT = Need(Role.editor)
ADMIN = Need(Role.admin)
EDIT_PREVIEW = Need(Role.editor, audit=False)
RESPOND_ALERT = Need(Role.responder, ownership.alert_team)
RESPOND_SILENCE = Need(Role.responder, ownership.silence_team)
EDIT_RULE = Need(Role.editor, ownership.rule_team)
EDIT_RUNBOOK = Need(Role.editor, ownership.runbook_team)
EDIT_CHANNEL = Need(Role.editor, ownership.channel_team)
EDIT_ROUTE = Need(Role.editor, ownership.route_team)

#: Routes that are not API routes (no per-route dependency runs): their path prefix, public.
PUBLIC_MOUNTS = ("/static",)

#: (method, path template) → decision. Every read page and read API is VIEW.
POLICY: dict[tuple[str, str], Decision] = {
    # --- public: health, docs, static, login, signed acknowledgement links
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("HEAD", "/openapi.json"): PUBLIC,
    ("GET", "/login"): PUBLIC,
    ("POST", "/login"): PUBLIC,
    ("POST", "/logout"): PUBLIC,
    ("GET", "/login/oidc"): PUBLIC,
    ("GET", "/login/oidc/callback"): PUBLIC,
    ("GET", "/api/v1/whoami"): PUBLIC,
    ("GET", "/notify/ack/{token}"): PUBLIC,
    ("POST", "/notify/ack/{token}"): Public(audit=True),
    # --- agents
    ("POST", "/api/v1/ingest"): AgentToken(),
    ("POST", "/api/v1/enroll"): EnrollmentToken(),
    # --- read pages
    ("GET", "/"): VIEW,
    ("GET", "/fleet"): VIEW,
    ("GET", "/fleet/_nodes"): VIEW,
    ("GET", "/alerts"): VIEW,
    ("GET", "/alerts/_list"): VIEW,
    ("GET", "/alerts/_summary"): VIEW,
    ("GET", "/alerts/{alert_id}"): VIEW,
    ("GET", "/dcgm"): VIEW,
    ("GET", "/api/v1/dcgm/endpoints"): VIEW,
    ("GET", "/incidents"): VIEW,
    ("GET", "/incidents/{incident_id}"): VIEW,
    ("GET", "/jobs/slurm/{job_id}"): VIEW,
    ("GET", "/maintenance"): VIEW,
    ("GET", "/metrics"): VIEW,
    ("GET", "/nodes/{hostname}"): VIEW,
    ("GET", "/nodes/{hostname}/_live"): VIEW,
    ("GET", "/nodes/{hostname}/gpus/{gpu}"): VIEW,
    ("GET", "/nodes/{hostname}/gpus/{gpu}/_live"): VIEW,
    ("GET", "/nodes/{hostname}/topology"): VIEW,
    ("GET", "/notifications"): VIEW,
    ("GET", "/notifications/channels/{channel_id}"): VIEW,
    ("GET", "/notifications/channels/{channel_id}/_log"): VIEW,
    ("GET", "/notifications/channels/{channel_id}/deliveries/{delivery_id}/_result"): VIEW,
    ("GET", "/reliability"): VIEW,
    ("GET", "/reliability.csv"): VIEW,
    ("GET", "/rules"): VIEW,
    ("GET", "/runbooks"): VIEW,
    ("GET", "/runbooks/{name}"): VIEW,
    ("GET", "/silences"): VIEW,
    ("GET", "/storage"): VIEW,
    ("GET", "/storage/_now"): VIEW,
    ("GET", "/topology"): VIEW,
    ("GET", "/topology/_drift"): VIEW,
    # --- read API
    ("GET", "/api/v1/alerts"): VIEW,
    ("GET", "/api/v1/alerts/{alert_id}"): VIEW,
    ("GET", "/api/v1/automation"): VIEW,
    ("GET", "/api/v1/channels"): VIEW,
    ("GET", "/api/v1/channels/{channel_id}"): VIEW,
    ("GET", "/api/v1/channels/{channel_id}/deliveries"): VIEW,
    ("GET", "/api/v1/health"): VIEW,
    ("GET", "/api/v1/incidents"): VIEW,
    ("GET", "/api/v1/incidents/{incident_id}"): VIEW,
    ("GET", "/api/v1/inhibit-rules"): VIEW,
    ("GET", "/api/v1/inhibit-rules/{name}"): VIEW,
    ("GET", "/api/v1/jobs/slurm/{job_id}"): VIEW,
    ("GET", "/api/v1/lifecycle"): VIEW,
    ("GET", "/api/v1/maintenance"): VIEW,
    ("GET", "/api/v1/maintenance/{window_id}"): VIEW,
    ("GET", "/api/v1/nodes"): VIEW,
    ("GET", "/api/v1/nodes/{hostname}"): VIEW,
    ("GET", "/api/v1/nodes/{hostname}/gpus/{gpu}"): VIEW,
    ("GET", "/api/v1/nodes/{hostname}/gpus/{gpu}/samples"): VIEW,
    ("GET", "/api/v1/nodes/{hostname}/health"): VIEW,
    ("GET", "/api/v1/nodes/{hostname}/lifecycle"): VIEW,
    ("GET", "/api/v1/nodes/{hostname}/nics"): VIEW,
    ("GET", "/api/v1/nodes/{hostname}/nvlinks"): VIEW,
    ("GET", "/api/v1/nodes/{hostname}/samples"): VIEW,
    ("GET", "/api/v1/nodes/{hostname}/storage"): VIEW,
    ("GET", "/api/v1/nodes/{hostname}/topology"): VIEW,
    ("GET", "/api/v1/reliability"): VIEW,
    ("GET", "/api/v1/routes"): VIEW,
    ("GET", "/api/v1/routes/{route_id}"): VIEW,
    ("GET", "/api/v1/rules"): VIEW,
    ("GET", "/api/v1/rules/{name}"): VIEW,
    ("GET", "/api/v1/runbooks"): VIEW,
    ("GET", "/api/v1/runbooks/{name}"): VIEW,
    ("GET", "/api/v1/silences"): VIEW,
    ("GET", "/api/v1/topology/drift"): VIEW,
    # --- responder: acknowledgements, silences, maintenance, lifecycle, remediation retries
    ("POST", "/alerts/{alert_id}/ack"): RESPOND_ALERT,
    ("POST", "/api/v1/alerts/{alert_id}/ack"): RESPOND_ALERT,
    ("POST", "/silences"): RESPOND,
    ("POST", "/silences/{silence_id}/expire"): RESPOND_SILENCE,
    ("POST", "/api/v1/silences"): RESPOND,
    ("POST", "/api/v1/silences/{silence_id}/expire"): RESPOND_SILENCE,
    ("POST", "/maintenance"): RESPOND,
    ("POST", "/maintenance/{window_id}/end"): RESPOND,
    ("POST", "/api/v1/maintenance"): RESPOND,
    ("POST", "/api/v1/maintenance/{window_id}/end"): RESPOND,
    ("POST", "/nodes/{hostname}/lifecycle"): RESPOND,
    ("POST", "/nodes/{hostname}/retire"): RESPOND,
    ("POST", "/nodes/{hostname}/return"): RESPOND,
    ("POST", "/api/v1/nodes/{hostname}/lifecycle"): RESPOND,
    ("POST", "/api/v1/nodes/{hostname}/retire"): RESPOND,
    ("POST", "/api/v1/nodes/{hostname}/return"): RESPOND,
    ("POST", "/api/v1/actions/{action_id}/retry"): RESPOND,
    # --- editor: rules, inhibitions, runbooks, channels, routes, automation breaker
    ("GET", "/rules/new"): EDIT,
    ("GET", "/rules/{name}/edit"): EDIT_RULE,
    ("GET", "/rules/{name}/delete"): EDIT_RULE,
    ("POST", "/rules"): EDIT,
    ("POST", "/rules/_preview"): EDIT_PREVIEW,
    ("POST", "/rules/{name}"): EDIT_RULE,
    ("POST", "/rules/{name}/delete"): EDIT_RULE,
    ("POST", "/rules/{name}/disable"): EDIT_RULE,
    ("POST", "/rules/{name}/enable"): EDIT_RULE,
    ("POST", "/api/v1/rules"): EDIT,
    ("POST", "/api/v1/rules/preview"): EDIT_PREVIEW,
    ("PUT", "/api/v1/rules/{name}"): EDIT_RULE,
    ("DELETE", "/api/v1/rules/{name}"): EDIT_RULE,
    ("POST", "/api/v1/rules/{name}/{action}"): EDIT_RULE,
    ("PUT", "/api/v1/inhibit-rules/{name}"): EDIT,
    ("DELETE", "/api/v1/inhibit-rules/{name}"): EDIT,
    ("GET", "/runbooks/{name}/edit"): EDIT_RUNBOOK,
    ("POST", "/runbooks/{name}/edit"): EDIT_RUNBOOK,
    ("POST", "/runbooks/{name}/preview"): EDIT_PREVIEW,
    ("POST", "/runbooks/{name}/revert"): EDIT_RUNBOOK,
    ("PUT", "/api/v1/runbooks/{name}"): EDIT_RUNBOOK,
    ("DELETE", "/api/v1/runbooks/{name}"): EDIT_RUNBOOK,
    ("GET", "/notifications/channels/new"): EDIT,
    ("GET", "/notifications/channels/{channel_id}/edit"): EDIT_CHANNEL,
    ("GET", "/notifications/channels/{channel_id}/delete"): EDIT_CHANNEL,
    ("POST", "/notifications/channels"): EDIT,
    ("POST", "/notifications/channels/{channel_id}/edit"): EDIT_CHANNEL,
    ("POST", "/notifications/channels/{channel_id}/delete"): EDIT_CHANNEL,
    ("POST", "/notifications/channels/{channel_id}/enabled"): EDIT_CHANNEL,
    ("POST", "/notifications/channels/{channel_id}/test"): EDIT_CHANNEL,
    ("POST", "/api/v1/channels"): EDIT,
    ("PATCH", "/api/v1/channels/{channel_id}"): EDIT_CHANNEL,
    ("DELETE", "/api/v1/channels/{channel_id}"): EDIT_CHANNEL,
    ("POST", "/api/v1/channels/{channel_id}/test"): EDIT_CHANNEL,
    ("GET", "/notifications/routes/new"): EDIT,
    ("GET", "/notifications/routes/{route_id}/edit"): EDIT_ROUTE,
    ("GET", "/notifications/routes/{route_id}/delete"): EDIT_ROUTE,
    ("POST", "/notifications/routes"): EDIT,
    ("POST", "/notifications/routes/{route_id}/edit"): EDIT_ROUTE,
    ("POST", "/notifications/routes/{route_id}/delete"): EDIT_ROUTE,
    ("POST", "/api/v1/routes"): EDIT,
    ("PUT", "/api/v1/routes/{route_id}"): EDIT_ROUTE,
    ("DELETE", "/api/v1/routes/{route_id}"): EDIT_ROUTE,
    ("POST", "/api/v1/automation/breaker/reset"): EDIT,
    # --- admin: users, tokens, audit trail, storage internals
    ("GET", "/admin/store"): ADMIN,
    ("GET", "/admin/access"): ADMIN,
    ("POST", "/admin/users"): ADMIN,
    ("POST", "/admin/users/{name}/active"): ADMIN,
    ("POST", "/admin/tokens"): ADMIN,
    ("POST", "/admin/tokens/{token_id}/revoke"): ADMIN,
    ("POST", "/admin/agent-tokens"): ADMIN,
    ("POST", "/admin/enrollment-tokens"): ADMIN,
    ("POST", "/admin/enrollment-tokens/{token_id}/revoke"): ADMIN,
    ("GET", "/api/v1/enrollment-tokens"): ADMIN,
    ("POST", "/api/v1/enrollment-tokens"): ADMIN,
    ("POST", "/api/v1/enrollment-tokens/{token_id}/revoke"): ADMIN,
    ("POST", "/admin/agent-tokens/{token_id}/revoke"): ADMIN,
    ("GET", "/audit"): ADMIN,
    ("GET", "/api/v1/audit"): ADMIN,
    ("GET", "/api/v1/users"): ADMIN,
    ("POST", "/api/v1/users"): ADMIN,
    ("GET", "/api/v1/tokens"): ADMIN,
    ("POST", "/api/v1/tokens"): ADMIN,
    ("POST", "/api/v1/tokens/{token_id}/revoke"): ADMIN,
}


def decision(method: str, path_template: str) -> Decision | None:
    """The decision for ``method`` on ``path_template``; ``None`` when the table has none."""
    return POLICY.get((method, path_template))

"""Who may do what: local users, teams, roles, sessions, API tokens and the route policy.

Node (agent) tokens stay in :mod:`app.auth`; the audit trail is :mod:`app.audit`.
"""

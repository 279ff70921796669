"""In-app runbooks (issue 5): Markdown files in ``runbooks/`` (``FLEETWATCH_RUNBOOKS_DIR``),
overridden by edits made in the UI (the ``runbook`` table), templated with an alert's context and
rendered to sanitised HTML."""

"""The audit trail: every change and action, who made it, when and from where."""

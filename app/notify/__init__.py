"""Alert notifications: channels, routing, the delivery outbox and its worker."""

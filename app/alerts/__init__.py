"""Alert rules and the alert lifecycle: rule specs, per-kind observations, the pending →
firing → resolved state machine, the scheduled evaluator, silences and acknowledgements."""

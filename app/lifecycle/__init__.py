"""A node's service lifecycle: in service → quarantined → remediating → validating → in
service, or RMA; every transition recorded with its cause (docs/remediation.md)."""

"""One GPU's page and API: ``/nodes/{hostname}/gpus/{gpu}`` and the same under ``/api/v1``."""

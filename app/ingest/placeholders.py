"""GPUs an agent reported without their own UUID: the agent could not open them (lost or in an
unknown error state before it started) and named them ``GPU-unknown-<PCI address>``.

Once the GPU at that address is read again under its real UUID, it *is* the placeholder's GPU:
it takes the placeholder's row (its lost history, events and incidents), instead of the
placeholder staying behind as a GPU missing from the node forever.
"""

from __future__ import annotations

from app.fleet.models import Gpu

#: The UUID prefix the agent (and its nvidia-smi parser) gives a GPU without a UUID.
PLACEHOLDER_PREFIX = "GPU-unknown-"


def placeholder_at(
    gpus: dict[str, Gpu], *, pci_bus_id: str | None, reported: set[str]
) -> Gpu | None:
    """The node's placeholder row at ``pci_bus_id`` that the batch no longer reports (its UUIDs
    are ``reported``), or ``None``. ``gpus``: the node's rows by UUID."""
    if not pci_bus_id:
        return None
    for gpu in gpus.values():
        if (
            gpu.uuid.startswith(PLACEHOLDER_PREFIX)
            and gpu.pci_bus_id == pci_bus_id
            and gpu.uuid not in reported
        ):
            return gpu
    return None

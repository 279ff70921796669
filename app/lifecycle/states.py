"""The lifecycle states of a node and the transitions between them.

In the style of CoreWeave's node lifecycle (production → triage → reboot-and-verify or RMA) and
NVIDIA NVSentinel's node labels (quarantined → draining → remediating → remediation-succeeded):

* ``in_service``: schedulable; every node starts here.
* ``quarantined``: taken out of scheduling (Slurm DRAIN, Kubernetes cordon) for a fault or by a
  person, awaiting a decision.
* ``remediating``: a repair is under way (reset, reboot, reseat, firmware).
* ``validating``: repaired, being checked (burn-in, DCGM diagnostics) before it returns.
* ``rma``: the hardware goes back to the vendor; it stays out of scheduling.

Leaving ``in_service`` takes the node out of the schedulers; entering it returns the node.
"""

from __future__ import annotations

from typing import Final, Literal

State = Literal["in_service", "quarantined", "remediating", "validating", "rma"]

IN_SERVICE: Final = "in_service"
QUARANTINED: Final = "quarantined"
REMEDIATING: Final = "remediating"
VALIDATING: Final = "validating"
RMA: Final = "rma"

#: Every state, in the order of the lifecycle (for lists and filters).
STATES: tuple[State, ...] = (IN_SERVICE, QUARANTINED, REMEDIATING, VALIDATING, RMA)

#: The states a node may go to from each state. A repair that fails goes back to quarantine; a
#: node back from RMA is validated before it returns.
NEXT: dict[State, frozenset[State]] = {
    IN_SERVICE: frozenset({QUARANTINED}),
    QUARANTINED: frozenset({REMEDIATING, VALIDATING, IN_SERVICE, RMA}),
    REMEDIATING: frozenset({VALIDATING, QUARANTINED, RMA}),
    VALIDATING: frozenset({IN_SERVICE, QUARANTINED, RMA}),
    RMA: frozenset({VALIDATING, QUARANTINED}),
}

#: What each state is called on pages.
LABELS: dict[State, str] = {
    IN_SERVICE: "In service",
    QUARANTINED: "Quarantined",
    REMEDIATING: "Remediating",
    VALIDATING: "Validating",
    RMA: "RMA",
}

#: Who or what caused a transition.
Cause = Literal["person", "rule", "incident", "alert", "system"]
CAUSES: tuple[Cause, ...] = ("person", "rule", "incident", "alert", "system")


def parse_state(text: str) -> State:
    """``text`` as a state.

    Raises:
        ValueError: not one of :data:`STATES` (the message lists them).
    """
    for state in STATES:
        if text == state:
            return state
    raise ValueError(f"unknown lifecycle state {text!r}; expected one of {', '.join(STATES)}")


def schedulable(state: State) -> bool:
    """Whether a node in ``state`` takes jobs."""
    return state == IN_SERVICE

"""``--inject-test-xid``: the self-test event is an Xid line of the chosen GPU marked test; a
GPU index the node lacks, a bad Xid or the flag without ``--once`` are refused naming why."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.main import main
from agents.self_test import self_test_xid_event
from agents.simulated.collector import SimulatedCollector

NOW = datetime(2026, 12, 4, 21, 0, tzinfo=UTC)


def test_the_event_is_the_gpus_xid_marked_test() -> None:
    inventory = SimulatedCollector("n1", 8).inventory()

    event = self_test_xid_event(inventory, xid=79, gpu_index=2, now=NOW)

    assert (event["kind"], event["xid"], event["test"]) == ("xid", 79, True)
    assert (event["gpu_uuid"], event["pci_bus_id"]) == (inventory[2]["uuid"], "00000000:0B:00.0")
    assert event["message"] == (
        "NVRM: Xid (PCI:0000:0b:00): 79, fleetwatch self-test from fleetwatch-agent "
        "--inject-test-xid: not a real fault"
    )


def test_a_gpu_index_the_node_lacks_is_refused_listing_those_it_has() -> None:
    inventory = SimulatedCollector("n1", 4).inventory()
    with pytest.raises(
        ValueError, match=r"--inject-gpu 7: no GPU of that index \(the node has 0, 1, 2, 3\)"
    ):
        self_test_xid_event(inventory, xid=79, gpu_index=7, now=NOW)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--inject-test-xid", "79"], "argument --inject-test-xid: only with --once"),
        (["--once", "--inject-test-xid", "x"], "expected an Xid number such as 79, got 'x'"),
        (["--once", "--inject-test-xid", "0"], "expected an Xid number such as 79, got '0'"),
    ],
)
def test_bad_use_is_refused_naming_the_flag(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--collector", "sim", "--server", "http://127.0.0.1:9", "--token", "t", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err

"""The spool keeps batches in send order, within its bounds, across restarts, and survives
corrupt files."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

import pytest

from agents import spool as spool_module
from agents.payload import build_node, build_payload, empty_sample, utc_now
from agents.spool import Spool


def _batch(samples: int = 1, pad: int = 0) -> dict[str, Any]:
    node = build_node("n1", {"pad": "x" * pad} if pad else {}, _info())
    rows = [empty_sample(f"GPU-{i}", utc_now()) for i in range(samples)]
    return build_payload(node, [], rows, [])


def _info() -> Any:
    return {"driver_version": None, "cuda_version": None}


def _drain(spool: Spool) -> list[str]:
    ids = []
    while (batch := spool.oldest()) is not None:
        ids.append(batch.batch_id)
        spool.remove(batch)
    return ids


def test_batches_come_back_oldest_first_with_their_original_batch_id(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    sent = [_batch() for _ in range(12)]
    for payload in sent:
        spool.put(payload)
    assert len(spool) == 12
    first = spool.oldest()
    assert first is not None and first.payload == sent[0] and first.sample_count == 1
    assert _drain(spool) == [p["batch_id"] for p in sent]
    assert list(tmp_path.iterdir()) == []


def test_file_names_sort_in_send_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    paths = [spool.put(_batch()) for _ in range(11)]
    assert [p.name for p in paths if p] == sorted(p.name for p in tmp_path.iterdir())


def test_a_full_spool_drops_the_oldest_batches_and_counts_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, max_files=3)
    sent = [_batch() for _ in range(5)]
    with caplog.at_level(logging.WARNING, logger="agents.spool"):
        for payload in sent:
            spool.put(payload)
    assert spool.dropped_batches == 2
    assert _drain(spool) == [p["batch_id"] for p in sent[2:]]
    assert "spool full" in caplog.text and "dropped oldest batch" in caplog.text


def test_the_byte_bound_is_kept_by_dropping_the_oldest(tmp_path: Path) -> None:
    size = len(Path(Spool(tmp_path / "probe").put(_batch(pad=2000)) or "").read_bytes())
    spool = Spool(tmp_path / "s", max_bytes=int(size * 3.5))
    sent = [_batch(pad=2000) for _ in range(6)]
    for payload in sent:
        spool.put(payload)
        assert spool.total_bytes <= spool.max_bytes
    assert spool.dropped_batches == 3
    assert _drain(spool) == [p["batch_id"] for p in sent[3:]]


def test_a_batch_larger_than_the_whole_spool_is_dropped(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=100)
    assert spool.put(_batch(pad=200)) is None
    assert spool.dropped_batches == 1 and len(spool) == 0


def test_batches_survive_a_restart_and_new_ones_queue_after_them(tmp_path: Path) -> None:
    before = Spool(tmp_path)
    old = [_batch() for _ in range(3)]
    for payload in old:
        before.put(payload)
    after = Spool(tmp_path)
    newer = _batch()
    after.put(newer)
    assert _drain(after) == [p["batch_id"] for p in [*old, newer]]


def test_an_interrupted_write_leaves_no_batch_behind(tmp_path: Path) -> None:
    (tmp_path / ".tmp-0000000000000007-abc.json").write_bytes(b'{"batch_')
    spool = Spool(tmp_path)
    assert len(spool) == 0 and list(tmp_path.iterdir()) == []


def test_corrupt_files_are_moved_aside_and_logged_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path)
    good = _batch()
    spool.put(_batch())
    spool.put(_batch())
    spool.put(good)
    first, second = sorted(tmp_path.iterdir())[:2]
    first.write_bytes(b"\x00\x01 not json")
    second.write_text('["a list, not a payload"]')
    with caplog.at_level(logging.WARNING, logger="agents.spool"):
        oldest = spool.oldest()
    assert oldest is not None and oldest.batch_id == good["batch_id"]
    assert spool.bad_files == 2
    assert sorted(p.name for p in tmp_path.glob("*.bad")) == [
        first.name + ".bad",
        second.name + ".bad",
    ]
    assert "moved aside" in caplog.text


def test_bounds_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Spool(tmp_path, max_bytes=0)


class _SmallDisk:
    """Stands in for a filesystem of ``capacity`` bytes under the spool (where no tmpfs can be
    mounted): a write that would overflow it raises ``ENOSPC`` as the kernel does."""

    def __init__(self, directory: Path, capacity: int) -> None:
        self.directory, self.capacity = directory, capacity
        self.refused = 0

    def __call__(self, path: Path, data: bytes) -> None:
        used = sum(p.stat().st_size for p in self.directory.iterdir())
        if used + len(data) > self.capacity:
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        path.write_bytes(data)


def test_a_full_disk_drops_the_oldest_batches_and_keeps_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    size = len(Path(Spool(tmp_path / "probe").put(_batch(pad=2000)) or "").read_bytes())
    spool = Spool(tmp_path / "s")  # its bound (256 MiB) is far above the disk's size
    disk = _SmallDisk(tmp_path / "s", capacity=int(size * 3.5))
    monkeypatch.setattr(spool_module, "_write_atomically", disk)
    sent = [_batch(pad=2000) for _ in range(7)]
    with caplog.at_level(logging.WARNING, logger="agents.spool"):
        for payload in sent:
            assert spool.put(payload) is not None
    assert disk.refused == 4
    assert spool.dropped_batches == 4
    assert _drain(spool) == [p["batch_id"] for p in sent[4:]]
    assert "disk full (No space left on device): dropped oldest batch" in caplog.text


def test_a_full_disk_with_no_batch_to_drop_refuses_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spool = Spool(tmp_path)
    monkeypatch.setattr(spool_module, "_write_atomically", _SmallDisk(tmp_path, capacity=10))
    with pytest.raises(OSError) as raised:
        spool.put(_batch())
    assert raised.value.errno == errno.ENOSPC
    assert len(spool) == 0 and spool.dropped_batches == 0


def test_other_write_errors_drop_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = Spool(tmp_path)
    kept = spool.put(_batch())

    def read_only(path: Path, data: bytes) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(spool_module, "_write_atomically", read_only)
    with pytest.raises(OSError):
        spool.put(_batch())
    assert len(spool) == 1 and kept is not None and kept.exists()

"""``kcompact status`` while a job runs (issue 43 item 1): a partition whose ``.cleaned`` files
belong to a live lease, or lie in a log dir whose ``.lock`` a live process holds, is being
cleaned, not interrupted; with neither, the files are an interruption's."""

from __future__ import annotations

import fcntl
import multiprocessing
import os

from kcompact.compaction.reports.status import status
from kcompact.operations import states
from tests.support import kp_keyed, write_partition

TS = 1_720_000_000_000


def partition_with_cleaned(log_dir):
    part = write_partition(log_dir / "orders-0", [(0, [kp_keyed(0, [b"a", b"a"], TS)]), (2, [kp_keyed(2, [b"b"], TS)])])
    (part / "00000000000000000000.log.cleaned").write_bytes(b"")
    return part


def _hold(path, ready, done):
    with open(path, "r+b") as f:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        ready.set()
        done.wait(30)


def test_leftovers_without_a_holder_are_an_interruption(tmp_path):
    partition_with_cleaned(tmp_path)
    (row,) = status([str(tmp_path)])
    assert row.state == "interrupted" and row.way_out.startswith("'kcompact recover'"), row


def test_leftovers_under_a_live_lease_are_being_cleaned(tmp_path):
    part = partition_with_cleaned(tmp_path)
    assert isinstance(states.acquire(str(part), "kcompact-0123456789ab"), states.Lease)
    (row,) = status([str(tmp_path)])
    assert row.state == "in_progress" and row.detail.startswith(
        f"being cleaned by owner kcompact-0123456789ab on {os.uname().nodename} pid {os.getpid()}"), row


def test_leftovers_in_a_locked_log_dir_name_the_lock_holder(tmp_path):
    partition_with_cleaned(tmp_path)
    (tmp_path / ".lock").touch()
    ready, done = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold, args=(str(tmp_path / ".lock"), ready, done))
    holder.start()
    try:
        assert ready.wait(30)
        (row,) = status([str(tmp_path)])
    finally:
        done.set()
        holder.join(30)
    assert row.state == "in use" and row.detail.startswith(f"being cleaned or loaded by process {holder.pid}"), row
    assert "(its files: 00000000000000000000.log.cleaned)" in row.detail

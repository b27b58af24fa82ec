"""A job's leases taken, renewed and given back all at once (issue 39, item 2): each partition ends
as ``states.acquire``/``renew``/``release`` one at a time would leave it (its state file written
by hand here, read back by path), while a log dir's batch shares one flock of its root, one
search for a new file's owner and bits, one write-back of the new files' bytes and one fsync of
the root, and one file that fails does not stop the others."""

from __future__ import annotations

import json
import os
import socket
import subprocess

from kcompact import storage
from kcompact.operations import states
from kcompact.storage import ownership
from tests.support import patch_storage


def dead_pid() -> int:
    proc = subprocess.Popen(["sleep", "0"])
    proc.wait()
    return proc.pid


def write_state(log_dir, name: str, doc: dict, mode: int | None = None) -> None:
    topic, number = name.rsplit("-", 1)
    path = log_dir / f"kcompact-state.{topic}-{number}.json"
    path.write_text(json.dumps(doc))
    if mode is not None:
        path.chmod(mode)


def on_disk(log_dir, name: str) -> dict | None:
    topic, number = name.rsplit("-", 1)
    path = log_dir / f"kcompact-state.{topic}-{number}.json"
    return json.loads(path.read_text()) if path.exists() else None


def counting(monkeypatch, module, name: str) -> list:
    calls, real = [], getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    if module is storage:
        patch_storage(monkeypatch, name, counted)
    else:
        monkeypatch.setattr(module, name, counted)
    return calls


def test_a_batch_takes_each_partition_as_acquire_would(tmp_path, monkeypatch):
    names = [f"t-{p}" for p in range(40)]
    for name in names:
        (tmp_path / name).mkdir()
    write_state(tmp_path, "t-1", {"state": "paused", "pause_count": 1}, mode=0o640)
    write_state(tmp_path, "t-2", {"state": "uncleanable", "reason": "CRC mismatch", "since_ms": 1})
    write_state(tmp_path, "t-3", {"state": "in_progress", "owner": "dead", "host": socket.gethostname(),
                                  "pid": dead_pid(), "started_ms": 1, "heartbeat_ms": states.wall_ms(),
                                  "lease_ms": 120_000})
    write_state(tmp_path, "t-4", {"state": "in_progress", "owner": "other", "host": "another-host", "pid": 1,
                                  "started_ms": 1, "heartbeat_ms": states.wall_ms(), "lease_ms": 120_000})
    root_fsyncs = counting(monkeypatch, storage, "fsync_dir")
    searches = counting(monkeypatch, ownership, "_sibling_modes")
    got = states.acquire_many([str(tmp_path / name) for name in names], "job-a")
    assert got[1].startswith("paused") and got[2].startswith("uncleanable: CRC mismatch")
    assert got[4].startswith("in progress (owner other on another-host")
    taken = [i for i, lease in enumerate(got) if isinstance(lease, states.Lease)]
    assert taken == [0, 3, *range(5, 40)]  # the dead holder's lease taken over
    for i in taken:
        doc = on_disk(tmp_path, names[i])
        assert doc["state"] == "in_progress" and doc["owner"] == "job-a" and doc["pid"] == os.getpid()
        read, version = states.read(str(tmp_path / names[i]))
        # a local lease's heartbeat: the later of its heartbeat_ms and the file's time, its write's
        assert doc["heartbeat_in_mtime"] is True and version == got[i].version
        assert got[i].state.heartbeat_ms <= read.heartbeat_ms <= states.wall_ms()
        assert read == states.replace(got[i].state, heartbeat_ms=read.heartbeat_ms)
    assert on_disk(tmp_path, "t-1") == {"state": "paused", "pause_count": 1}
    assert len(searches) == 1, "the owner and bits of new state files searched for once, not per file"
    assert len([a for a in root_fsyncs if a[0] == str(tmp_path)]) == 2  # the batch's, and t-3's takeover
    assert {oct((tmp_path / f"kcompact-state.t-{i}.json").stat().st_mode & 0o777) for i in (0, 5, 39)} == {"0o640"}
    assert not list(tmp_path.glob("*.tmp"))


def test_one_file_that_cannot_be_written_does_not_stop_the_others(tmp_path):
    paths = [str(tmp_path / f"t-{p}") for p in range(3)]
    (tmp_path / "kcompact-state.t-1.json.tmp").mkdir()  # its temp name taken by a directory
    got = states.acquire_many(paths, "job-a")
    assert isinstance(got[1], OSError) and on_disk(tmp_path, "t-1") is None
    assert isinstance(got[0], states.Lease) and isinstance(got[2], states.Lease)
    assert on_disk(tmp_path, "t-2")["owner"] == "job-a"


def test_a_renewal_round_moves_each_heartbeat_and_loses_an_aborted_lease(tmp_path, monkeypatch):
    """Locally a round sets each lease file's time and writes nothing: its bytes and version stay,
    an abort written before it is neither overwritten nor renewed, and the heartbeat read back is
    the round's."""
    paths = [str(tmp_path / f"t-{p}") for p in range(20)]
    leases = states.acquire_many(paths, "job-a")
    states.abort(paths[7])
    aborted = states.read(paths[7])[0]
    before = {i: (tmp_path / f"kcompact-state.t-{i}.json").read_bytes() for i in range(20)}
    monkeypatch.setattr(states, "wall_ms", lambda: leases[0].state.heartbeat_ms + 5_000)
    replaced, fsynced = counting(monkeypatch, os, "replace"), counting(monkeypatch, os, "fsync")
    renewed = states.renew_many(leases)
    assert renewed[7] is None and on_disk(tmp_path, "t-7")["state"] == "aborted"  # the abort is not lost
    assert states.read(paths[7])[0].heartbeat_ms == aborted.heartbeat_ms  # nor renewed: it lapses as it was
    assert "heartbeat_in_mtime" not in on_disk(tmp_path, "t-7")
    for i in (0, 8, 19):
        path = tmp_path / f"kcompact-state.t-{i}.json"
        assert renewed[i].state.heartbeat_ms == leases[i].state.heartbeat_ms + 5_000
        assert path.read_bytes() == before[i] and renewed[i].version == leases[i].version
        assert path.stat().st_mtime_ns == renewed[i].state.heartbeat_ms * 1_000_000
        assert states.read(paths[i])[0].heartbeat_ms == renewed[i].state.heartbeat_ms
    assert replaced == [] and fsynced == []
    again = states.renew_many([lease for i, lease in enumerate(renewed) if i != 7])
    assert all(isinstance(lease, states.Lease) for lease in again)
    (tmp_path / "kcompact-state.t-3.json").unlink()  # given back by someone else: gone
    assert states.renew_many([leases[3]]) == [None]


def test_a_lease_file_time_is_a_heartbeat_only_when_the_lease_says_so(tmp_path):
    """A lease file written by hand, or by an older job, without ``heartbeat_in_mtime``: its time
    is not a heartbeat, so a new file with an old heartbeat has expired; with it, the later of the
    two counts, and an old time is an old heartbeat."""
    old = states.wall_ms() - 600_000
    lease = {"state": "in_progress", "owner": "j", "host": "h", "pid": 1, "started_ms": old, "heartbeat_ms": old,
             "lease_ms": 120_000}
    write_state(tmp_path, "t-0", lease)
    write_state(tmp_path, "t-1", lease | {"heartbeat_in_mtime": True})
    write_state(tmp_path, "t-2", lease | {"heartbeat_in_mtime": True})
    stale = (old + 1_000) * 1_000_000
    os.utime(tmp_path / "kcompact-state.t-2.json", ns=(stale, stale))
    assert states.read(str(tmp_path / "t-0"))[0].expired()
    assert not states.read(str(tmp_path / "t-1"))[0].expired()
    assert states.read(str(tmp_path / "t-2"))[0].heartbeat_ms == old + 1_000
    assert states.read(str(tmp_path / "t-2"))[0].expired()


def test_giving_back_a_batch_acknowledges_what_operators_asked(tmp_path):
    paths = [str(tmp_path / f"t-{p}") for p in range(20)]
    leases = states.acquire_many(paths, "job-a")
    states.pause(paths[3])  # an abort with a pause: paused once the job lets go
    states.abort(paths[4])  # an abort alone: idle
    released = states.release_many(leases)
    assert released[3] == states.CleaningState(states.PAUSED, pause_count=1)
    assert on_disk(tmp_path, "t-3") == {"state": "paused", "pause_count": 1}
    assert all(state == states.CleaningState() for i, state in enumerate(released) if i != 3)
    assert sorted(p.name for p in tmp_path.glob("kcompact-state.*")) == ["kcompact-state.t-3.json"]


def test_a_late_batch_release_leaves_the_next_owner_alone(tmp_path):
    paths = [str(tmp_path / f"t-{p}") for p in range(3)]
    old = states.acquire_many(paths, "dead-job", lease_ms=1)
    stale = {key: value for key, value in json.loads(old[1].state.to_json()).items() if key != "heartbeat_in_mtime"}
    write_state(tmp_path, "t-1", {**stale, "heartbeat_ms": 1})  # its file's time no heartbeat: long expired
    assert isinstance(states.acquire(paths[1], "next-job"), states.Lease)  # expired: taken over
    states.release_many(old)
    assert on_disk(tmp_path, "t-1")["owner"] == "next-job"
    assert on_disk(tmp_path, "t-0") is None and on_disk(tmp_path, "t-2") is None


def test_a_long_batch_lets_the_flock_go_between_its_parts(tmp_path, monkeypatch):
    from kcompact.storage import cas

    monkeypatch.setattr(cas, "BATCH", 8)
    holds = counting(monkeypatch, cas, "_dir_flock")
    paths = [str(tmp_path / f"t-{p}") for p in range(20)]
    assert all(isinstance(lease, states.Lease) for lease in states.acquire_many(paths, "job-a"))
    assert len(holds) == 3 and len(list(tmp_path.glob("kcompact-state.*.json"))) == 20

"""A dead job's leases on object storage (issue 27): no ``.lock`` tells there that a lease's job is
gone, so a lease whose process of this host is known dead (its pid not alive, or now a later
process's) is taken over at once, as on local disk; a lease of another host or of a live process is
respected until it expires, and the run that meets it says so, holder and expiry, and ends partial
(4), never 0; ``recover`` notes it without failing.

Log dirs in the session's moto bucket (the takeover on SeaweedFS too); state files written as the
holders would leave them; the commands run in this process on the session's Spark.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from kcompact.jobs.cli import main
from kcompact.operations import states
from tests.e2e.test_safety import NOW, TOPIC_ARGS, dirty_partition

BUCKET = "kc-leases"
HOUR = 3_600_000


@pytest.fixture(scope="module")
def s3(s3_endpoint):
    import s3fs

    fs = s3fs.S3FileSystem(use_listings_cache=False)  # the test's own view of the bucket, always fresh
    if not fs.exists(BUCKET):  # made already where the takeover test ran first on moto
        fs.mkdir(BUCKET)
    return fs


def dead_pid() -> int:
    proc = subprocess.Popen(["sleep", "0"])
    proc.wait()
    return proc.pid


def log_dir(s3, tmp_path: Path, prefix: str, names: list[str]) -> str:
    local = tmp_path / prefix
    for name in names:
        dirty_partition(local / name)
    s3.put(f"{local}/", f"{BUCKET}/{prefix}/", recursive=True)
    return f"s3://{BUCKET}/{prefix}"


def put_lease(s3, url: str, name: str, owner: str, pid: int, host: str | None = None,
              started_ms: int | None = None) -> bytes:
    """The state file a job's lease leaves (fresh heartbeat, the default length: valid two more minutes)."""
    now = states.wall_ms()
    doc = {"state": "in_progress", "owner": owner, "host": host or socket.gethostname(), "pid": pid,
           "started_ms": now - HOUR if started_ms is None else started_ms, "heartbeat_ms": now,
           "lease_ms": states.LEASE_MS}
    data = json.dumps(doc).encode()
    s3.pipe(f"{url.removeprefix('s3://')}/kcompact-state.{name}.json", data)
    return data


def state_files(s3, url: str) -> dict[str, bytes]:
    root = url.removeprefix("s3://")
    return {n.rsplit("/", 1)[1]: s3.cat(n) for n in s3.ls(root, detail=False)
            if n.rsplit("/", 1)[1].startswith("kcompact-state.")}


def committed(report: Path) -> list[str]:
    doc = json.loads(report.read_text())
    doc = doc.get("compaction", doc)
    return sorted(f"{p['topic']}-{p['partition']}" for p in doc["partitions"] if p["committed"])


def test_compact_takes_over_the_leases_of_a_dead_process_of_this_host(spark_s3, store, tmp_path, capsys):
    """SIGKILLed mid-run: a state file per partition, lease still valid, its pid gone: cleaned now.
    On moto and on SeaweedFS (``store``), whose conditional writes the takeover's compare-and-swap
    meets."""
    s3 = store.fs()
    if not s3.exists(BUCKET):
        s3.mkdir(BUCKET)
    names = ["t-0", "t-1", "t-2"]
    url = log_dir(s3, tmp_path, "dead", names)
    pid = dead_pid()
    with store.installed(spark_s3):
        for name in names:
            put_lease(s3, url, name, "kcompact-killed", pid)
        assert not states.read(f"{url}/t-0")[0].expired()  # valid for two more minutes
        code = main(["compact", url, "--now", str(NOW), *TOPIC_ARGS, "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert committed(tmp_path / "r.json") == names
    assert state_files(s3, url) == {}  # every lease given back: idle
    assert f"taking over the lease of owner kcompact-killed on {socket.gethostname()} pid {pid}" in out
    assert "held by another job" not in out


def test_compact_and_run_respect_live_and_foreign_leases_and_end_partial(spark_s3, s3, tmp_path, capsys,
                                                                        live_child):
    url = log_dir(s3, tmp_path, "live", ["t-0", "t-1", "t-2", "t-3"])
    host = socket.gethostname()
    kept = {"kcompact-state.t-0.json": put_lease(s3, url, "t-0", "kcompact-live", live_child.pid,
                                                 started_ms=states.wall_ms()),
            "kcompact-state.t-1.json": put_lease(s3, url, "t-1", "kcompact-far", dead_pid(), host="far-away")}
    code = main(["compact", url, "--now", str(NOW), *TOPIC_ARGS, "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 4, out
    assert committed(tmp_path / "r.json") == ["t-2", "t-3"]
    lines = out.split("\n")
    live = [line for line in lines if line.startswith("held by another job: 1 partition (owner kcompact-live, ")]
    assert len(live) == 1 and f"host {host}, pid {live_child.pid}, lease until 20" in live[0], out
    assert live[0].endswith("-> it is cleaned once that job ends or its lease lapses")
    assert lines[lines.index(live[0]) + 1] == f"  {url}: t-0"
    far = [line for line in lines if line.startswith("held by another job: 1 partition (owner kcompact-far, ")]
    assert len(far) == 1 and "host far-away, pid " in far[0] and ", lease until 20" in far[0], out
    assert lines[lines.index(far[0]) + 1] == f"  {url}: t-1"
    assert state_files(s3, url) == kept  # left as their holders wrote them
    held = json.loads((tmp_path / "r.json").read_text())["held"]
    assert [(h["partition"], h["owner"], h["pid"]) for h in held] == [
        ("t-0", "kcompact-live", live_child.pid),
        ("t-1", "kcompact-far", json.loads(kept["kcompact-state.t-1.json"])["pid"]),
    ]
    # nothing left to clean but the held ones: still partial, and said so, not "0 partitions ... " and 0
    code = main(["run", url, "--now", str(NOW), *TOPIC_ARGS])
    out = capsys.readouterr().out
    assert code == 4, out
    assert "held by another job: 1 partition (owner kcompact-live, " in out
    assert "held by another job: 1 partition (owner kcompact-far, " in out
    assert out.rstrip().split("\n")[-1].startswith("nothing cleaned: 2 partitions held by another job (above)"), out
    assert not [line for line in out.split("\n") if line.startswith("0 partitions")]
    assert state_files(s3, url) == kept


def test_recover_notes_a_live_foreign_lease_and_takes_back_a_dead_one(s3, tmp_path, capsys, live_child):
    url = log_dir(s3, tmp_path, "recover", ["t-0", "t-1", "t-2"])
    kept = put_lease(s3, url, "t-0", "kcompact-live", live_child.pid, started_ms=states.wall_ms())
    put_lease(s3, url, "t-1", "kcompact-killed", dead_pid())
    assert main(["recover", url]) == 0
    out = capsys.readouterr().out
    note = [line for line in out.split("\n") if line.startswith("note: ")]
    assert note == [f"note: {url}/t-0: held by another job: {states.parse('x', kept).skip_reason} -> left to it; "
                    "recovered by the next job or 'kcompact recover' once it ends or its lease lapses"], out
    assert "recovery: 2 partitions checked, 0 recovered, 0 skipped, 0 with problems, 1 held by another job" in out
    assert state_files(s3, url) == {"kcompact-state.t-0.json": kept}  # t-1's dead lease given back

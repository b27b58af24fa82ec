"""Files a command may not read (issue 26, items 5 and 7): a segment of mode 000 on local disk, and on
S3 (moto) an object of an archive storage class, listed and HEAD-able but refused to a GET
(InvalidObjectState, which s3fs raises as a PermissionError naming no object).

What is expected, worked out from the README's exit codes and Kafka's behaviour, never from the code
under test: the partition fails naming the file (on an object store its ``s3://`` URL, also for an
error raised inside a Spark task) while the job goes on with the others (exit 4; 5 when every
partition failed); it is not marked uncleanable (the operator fixes the mode or restores the
object, and the next run cleans it); ``verify`` and ``dump`` list the file as a problem (exit 1: a
broker cannot load it either); a partition dir the command cannot list is refused (exit 2) before
anything is written, the broker's ``.lock`` included.

The tests run as root, and root reads mode-000 files: the local commands run under util-linux's
``setpriv`` without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (inheritable and bounding sets), so
the child stays root (and runs the venv's interpreter) but honours file modes. ``unprivileged``
first proves the drop worked: the child cannot open a mode-000 file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.e2e.test_compaction_bad_input import corrupt_partition, empty_producer_snapshot, recs
from tests.support import checkpoint_text, seg_path, write_partition

NOW = "1720300000000"
TOPICS = ["--topic-config", "*:cleanup.policy=compact,min.cleanable.dirty.ratio=0.01"]
UNREADABLE = "unreadable (retried next run): "  # how a job says a file it may not read (not the log's fault)
REPO = Path(__file__).resolve().parents[2]
SETPRIV = shutil.which("setpriv") or next((p for p in ("/usr/bin/setpriv", "/bin/setpriv") if os.path.exists(p)), None)
NO_DAC = ["--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search", "--"]


def log_of(part: Path, base: int = 0) -> Path:
    return seg_path(part, base, "log")


def unreadable_dirty(part: Path) -> Path:
    """0..2 a a b | 3..5 c c d | active 6 e, a producer snapshot at 6: the planner replays the active
    segment only, and reads the first batch of the dirty segments 0 and 3 (max.compaction.lag.ms):
    segment 0, mode 000, is met by the planner."""
    write_partition(part, [(0, [recs(0, [b"a", b"a", b"b"])]), (3, [recs(3, [b"c", b"c", b"d"])]),
                           (6, [recs(6, [b"e"])])])
    seg_path(part, 6, "snapshot").write_bytes(empty_producer_snapshot())
    return log_of(part)


def tree(root: Path) -> dict:
    """Every file and directory under ``root``: mode, and the bytes' hash (read as root)."""
    return {
        str(p.relative_to(root)): (p.stat().st_mode, None if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
    }


def state(log_dir: Path, name: str) -> str | None:
    path = log_dir / f"kcompact-state.{name}.json"
    return json.loads(path.read_text())["state"] if path.exists() else None


# -- the commands, without root's power to read any file ---------------------------------------------------
@pytest.fixture(scope="module")
def unprivileged(tmp_path_factory) -> list[str]:
    """The prefix that runs a command honouring file modes (none when not root: modes apply anyway)."""
    if os.geteuid() != 0:
        return []
    if SETPRIV is None:
        pytest.skip("setpriv (util-linux) is missing: as root the command would read the mode-000 files anyway")
    probe = tmp_path_factory.mktemp("probe") / "secret"
    probe.write_bytes(b"x")
    probe.chmod(0)
    prefix = [SETPRIV, *NO_DAC]
    tried = subprocess.run([*prefix, sys.executable, "-c", f"open({str(probe)!r}, 'rb')"],
                           capture_output=True, text=True, timeout=120)
    assert tried.returncode != 0 and "PermissionError" in tried.stderr, (
        f"setpriv did not drop the capabilities: the child read a mode-000 file ({tried.stderr})")
    return prefix


def child_env(**more: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("KCOMPACT_DEBUG",)}
    return env | {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                  "KCOMPACT_SPARK_LOG_LEVEL": "ERROR"} | more


def kcompact(prefix: list[str], *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "kcompact.jobs.cli", *args], env=env or child_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=900)


# -- local disk: a segment of mode 000 --------------------------------------------------------------------
@pytest.fixture(scope="module")
def local(unprivileged, tmp_path_factory):
    """Log dir A: dirty-0 (its segment 0 unreadable, met by the planner), clean-0 (the same layout
    with a cleaner checkpoint at 3: its unreadable segment 0 is clean, so the planner does not read
    it and the job's first stage does), good-0. Log dir B: dirty-0 alone. Each compacted once."""
    root = tmp_path_factory.mktemp("unreadable")
    a, b = root / "a", root / "b"
    dirty = unreadable_dirty(a / "dirty-0")
    clean = unreadable_dirty(a / "clean-0")
    write_partition(a / "good-0", [(0, [recs(0, [b"a", b"a", b"b"])]), (3, [recs(3, [b"c"])])])
    (a / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("clean", 0, 3)]))
    only = unreadable_dirty(b / "dirty-0")
    (b / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([]))
    for path in (dirty, clean, only):
        path.chmod(0)
    before = tree(a)
    verify = kcompact(unprivileged, "verify", str(a))
    dump = kcompact(unprivileged, "dump", str(dirty))
    report = root / "report.json"
    compact = kcompact(unprivileged, "compact", str(a), "--now", NOW, *TOPICS, "--cores", "1", "--report", str(report))
    all_failed = kcompact(unprivileged, "compact", str(b), "--now", NOW, *TOPICS, "--cores", "1")
    return SimpleNamespace(a=a, b=b, dirty=dirty, clean=clean, before=before, after=tree(a), verify=verify, dump=dump,
                           compact=compact, all_failed=all_failed,
                           report=json.loads(report.read_text()) if report.exists() else None)


def test_an_unreadable_segment_fails_its_partition_naming_the_file(local):
    run = local.compact
    assert "internal error" not in run.stderr, run.stderr
    assert run.returncode == 4, (run.returncode, run.stdout, run.stderr)  # partial: good-0 was cleaned
    by = {p["topic"]: p for p in local.report["partitions"]}
    # dirty-0: the planner met it; clean-0: the job's first stage did (the planner reads no clean segment)
    assert by["dirty"]["error"] == f"{UNREADABLE}{local.dirty}: permission denied"
    assert by["clean"]["error"] == f"{UNREADABLE}{local.clean}: permission denied"
    assert by["good"]["error"] is None and by["good"]["committed"]
    for path in (local.dirty, local.clean):
        assert f"{path}: permission denied" in run.stdout, run.stdout


def test_an_unreadable_segment_is_not_marked_uncleanable(local):
    """The operator's to fix (the file's mode): the next run tries again, no reset-uncleanable needed."""
    assert state(local.a, "dirty-0") != "uncleanable" and state(local.a, "clean-0") != "uncleanable"
    assert "uncleanable partitions: " + f"{local.a}: 0" in local.compact.stdout
    # the failed partitions are as they were, their unreadable segments too
    for name in ("dirty-0", "clean-0"):
        assert {k: v for k, v in local.after.items() if k.startswith(name)} == \
            {k: v for k, v in local.before.items() if k.startswith(name)}


def test_every_partition_unreadable_fails_the_run(local):
    run = local.all_failed
    assert "internal error" not in run.stderr, run.stderr
    assert run.returncode == 5, (run.returncode, run.stdout, run.stderr)
    assert f"{log_of(local.b / 'dirty-0')}: permission denied" in run.stdout


def test_verify_and_dump_list_an_unreadable_file_as_a_problem(local):
    verify = local.verify
    assert verify.returncode == 1, (verify.returncode, verify.stdout, verify.stderr)
    assert "kcompact: error" not in verify.stderr, verify.stderr
    problems = verify.stdout.splitlines()
    for path in (local.dirty, local.clean):
        assert f"{path}: cannot be read: permission denied" in problems, problems
    assert "2 problem(s)" in verify.stderr  # the two files, and nothing else of the log dir
    dump = local.dump
    assert dump.returncode == 1, (dump.returncode, dump.stdout, dump.stderr)
    assert f"Error: {local.dirty}: cannot be read: permission denied" in dump.stdout.splitlines(), dump.stdout


@pytest.mark.parametrize("command", ["compact", "retain", "run", "recover", "plan"])
def test_an_unreadable_partition_dir_is_refused_before_anything_is_written(unprivileged, tmp_path, command):
    log_dir = tmp_path / "logs"
    write_partition(log_dir / "good-0", [(0, [recs(0, [b"a", b"a", b"b"])]), (3, [recs(3, [b"c"])])])
    (log_dir / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([]))
    closed = log_dir / "closed-0"
    write_partition(closed, [(0, [recs(0, [b"a"])])])
    closed.chmod(0)
    before = tree(log_dir)
    args = [str(log_dir)] if command == "recover" else [str(log_dir), "--now", NOW, *TOPICS, "--cores", "1"]
    run = kcompact(unprivileged, command, *args)
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert not (log_dir / ".lock").exists()  # a refused command writes nothing, the broker's lock file included
    assert f"kcompact: {closed}: permission denied" in run.stderr and "internal error" not in run.stderr, run.stderr
    assert tree(log_dir) == before


def test_an_unreadable_checkpoint_file_is_refused_before_anything_is_written(unprivileged, tmp_path):
    log_dir = tmp_path / "logs"
    write_partition(log_dir / "good-0", [(0, [recs(0, [b"a", b"a", b"b"])]), (3, [recs(3, [b"c"])])])
    closed = log_dir / "cleaner-offset-checkpoint"
    closed.write_bytes(checkpoint_text([("good", 0, 0)]))
    closed.chmod(0)
    before = tree(log_dir)
    run = kcompact(unprivileged, "compact", str(log_dir), "--now", NOW, *TOPICS, "--cores", "1")
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert not (log_dir / ".lock").exists() and tree(log_dir) == before
    assert f"kcompact: {closed}: permission denied" in run.stderr, run.stderr


# -- object stores: an object the store refuses to read, errors raised inside Spark's tasks --------------------
BUCKET = "kc-unreadable"


@pytest.fixture(scope="module")
def on_s3(s3_endpoint, tmp_path_factory):
    """s3://kc-unreadable/logs: corrupt-0 (a CRC broken in segment 0, met by the job), archived-0
    (its dirty segment 0 in GLACIER, met by the planner), cold-0 (its clean segment 0 in GLACIER,
    met by the job's first stage), good-0. Verified, then compacted once."""
    import s3fs

    fs = s3fs.S3FileSystem(use_listings_cache=False)
    fs.mkdir(BUCKET)
    src = tmp_path_factory.mktemp("s3src")
    corrupt_log, corrupt_at = corrupt_partition(src / "corrupt-0")
    unreadable_dirty(src / "archived-0")
    unreadable_dirty(src / "cold-0")
    write_partition(src / "good-0", [(0, [recs(0, [b"a", b"a", b"b"])]), (3, [recs(3, [b"c"])])])
    (src / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("cold", 0, 3)]))
    fs.put(f"{src}/", f"{BUCKET}/logs/", recursive=True)
    url = f"s3://{BUCKET}/logs"
    archived = {}
    for name in ("archived-0", "cold-0"):
        key = f"{BUCKET}/logs/{name}/{log_of(Path(name)).name}"
        fs.pipe_file(key, fs.cat_file(key), StorageClass="GLACIER")  # listed, HEAD-able, its GET refused
        archived[name] = f"s3://{key}"
    env = child_env(FSSPEC_S3=json.dumps({"client_kwargs": {"endpoint_url": s3_endpoint}}),
                    AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    verify = kcompact([], "verify", url, env=env)
    report = tmp_path_factory.mktemp("s3report") / "report.json"
    compact = kcompact([], "compact", url, "--now", NOW, *TOPICS, "--cores", "1", "--report", str(report), env=env)
    return SimpleNamespace(fs=fs, url=url, archived=archived, verify=verify, compact=compact,
                           corrupt=f"{url}/corrupt-0/{Path(corrupt_log).name}: byte {corrupt_at}: ",
                           report=json.loads(report.read_text()) if report.exists() else None)


def test_errors_from_spark_tasks_name_the_objects_url(on_s3):
    run = on_s3.compact
    assert "internal error" not in run.stderr, run.stderr
    assert run.returncode == 4, (run.returncode, run.stdout, run.stderr)
    by = {p["topic"]: p for p in on_s3.report["partitions"]}
    assert by["corrupt"]["error"].startswith(on_s3.corrupt), by["corrupt"]["error"]
    refused = "the operation is not valid for the object's storage class"
    assert by["archived"]["error"] == f"{UNREADABLE}{on_s3.archived['archived-0']}: {refused}"
    assert by["cold"]["error"] == f"{UNREADABLE}{on_s3.archived['cold-0']}: {refused}"
    assert by["good"]["error"] is None and by["good"]["committed"]
    for url in on_s3.archived.values():
        assert f"{url}: {refused}" in run.stdout, run.stdout


def test_an_object_the_store_refuses_is_not_marked_uncleanable(on_s3):
    for name in ("archived-0", "cold-0"):
        found = on_s3.fs.find(f"{BUCKET}/logs/kcompact-state.{name}.json")
        assert not found or json.loads(on_s3.fs.cat_file(found[0]))["state"] != "uncleanable"
    assert json.loads(on_s3.fs.cat_file(f"{BUCKET}/logs/kcompact-state.corrupt-0.json"))["state"] == "uncleanable"


def test_verify_names_the_refused_objects_url(on_s3):
    verify = on_s3.verify
    assert verify.returncode == 1, (verify.returncode, verify.stdout, verify.stderr)
    problems = verify.stdout.splitlines()
    for url in on_s3.archived.values():
        assert f"{url}: cannot be read: the operation is not valid for the object's storage class" in problems, problems
    assert any(line.startswith(on_s3.corrupt) for line in problems), problems

"""The storage seam: local paths and s3:// URLs (moto's S3 server) behave alike, and the
readers give the same answers over both."""

from __future__ import annotations

import posixpath
import uuid

import pytest

import storage
from readers.logdir import scan_log_dir
from readers.segment import iter_batches
from tests.support import FIXTURE_INPUT
from tests.support import TREE, make_log_dir

BUCKET = "kcompact-test"


# -- helpers ------------------------------------------------------------------------------------
def rel(path: str, root: str) -> str:
    return posixpath.relpath(path.split("://", 1)[-1], root.split("://", 1)[-1])


def listing(logdir) -> dict:
    """scan_log_dir's answer with paths relative to the log dir (mtimes differ between stores)."""
    root = logdir.path

    def file(info):
        return None if info is None else (rel(info.path, root), info.size)

    return {
        "partitions": [
            (p.topic, p.partition, rel(p.path, root),
             [(s.base_offset, file(s.log), file(s.index), file(s.timeindex), file(s.txnindex)) for s in p.segments],
             sorted(file(i) for i in p.leftovers),
             sorted(str(problem).replace(p.path, "<dir>") for problem in p.problems))
            for p in logdir.partitions
        ],
        "checkpoints": {name: rel(path, root) for name, path in logdir.checkpoints.items()},
        "skipped": sorted(rel(s, root) for s in logdir.skipped),
        "problems": sorted(rel(problem.path, root) for problem in logdir.problems),
    }


def batches_of(path: str, **kwargs) -> list[tuple[int, bytes]]:
    with storage.open_read(path) as f:
        return [(b.position, bytes(b.data)) for b in iter_batches(f, path, **kwargs)]


@pytest.fixture(scope="module")
def s3(s3_endpoint):
    import s3fs

    fs = s3fs.S3FileSystem()
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    return fs


@pytest.fixture(scope="module")
def s3_input(s3):
    """The Kafka-written fixture log dir, uploaded."""
    s3.put(str(FIXTURE_INPUT), f"{BUCKET}/input", recursive=True)
    s3.invalidate_cache()
    return f"s3://{BUCKET}/input"


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    """An empty directory, on local disk or on S3."""
    if request.param == "local":
        return str(tmp_path)
    request.getfixturevalue("s3")
    return f"s3://{BUCKET}/scratch-{uuid.uuid4().hex[:8]}"


# -- log dirs over S3 --------------------------------------------------------------------------
def test_s3_fixture_listing_equals_local(s3_input):
    local, remote = scan_log_dir(str(FIXTURE_INPUT)), scan_log_dir(s3_input)
    assert listing(remote) == listing(local)
    assert remote.partitions[0].segments[0].log.path.startswith(f"s3://{BUCKET}/input/")
    assert all(s.log.mtime_ms > 0 for p in remote.partitions for s in p.segments)
    assert remote.checkpoints == {"cleaner-offset-checkpoint": f"{s3_input}/cleaner-offset-checkpoint"}


def test_s3_synthetic_listing_equals_local(s3, tmp_path):
    local_root = make_log_dir(tmp_path / "logs", empty_dirs=False)  # S3 keeps no empty directories
    s3.put(str(local_root), f"{BUCKET}/synthetic", recursive=True)
    s3.invalidate_cache()
    local, remote = scan_log_dir(str(local_root)), scan_log_dir(f"s3://{BUCKET}/synthetic")
    assert listing(remote) == listing(local)
    assert len(remote.skipped) == 3 and len(remote.problems) == 2
    assert sum(len(p.leftovers) for p in remote.partitions) == 3


def test_s3_batches_equal_local(s3_input):
    local = scan_log_dir(str(FIXTURE_INPUT))
    remote = scan_log_dir(s3_input)
    for lp, rp in zip(local.partitions, remote.partitions):
        for ls, rs in zip(lp.segments, rp.segments):
            assert batches_of(rs.log.path) == batches_of(ls.log.path), rs.log.path


def test_s3_small_chunks_and_byte_ranges(s3_input):
    rel_path = "accounts-0/00000000000000000000.log"
    local = batches_of(str(FIXTURE_INPUT / rel_path))
    assert batches_of(f"{s3_input}/{rel_path}", chunk_size=16 << 10) == local
    start, end = local[10][0], local[20][0]
    assert batches_of(f"{s3_input}/{rel_path}", start=start, end=end, chunk_size=4096) == local[10:20]
    data = (FIXTURE_INPUT / rel_path).read_bytes()
    assert storage.read_range(f"{s3_input}/{rel_path}", start, end) == data[start:end]
    assert storage.read_bytes(f"{s3_input}/{rel_path}") == data


# -- the seam itself, on both stores -----------------------------------------------------------
def test_write_list_read(root):
    storage.makedirs(storage.join(root, "t-0"))
    storage.write_durable(storage.join(root, "t-0", "00000000000000000000.log"), b"0123456789")
    storage.write_durable(storage.join(root, "cleaner-offset-checkpoint"), b"0\n0\n")

    files, dirs = storage.list_dir(root)
    assert [(rel(f.path, root), f.size) for f in files] == [("cleaner-offset-checkpoint", 4)]
    assert [rel(d, root) for d in dirs] == ["t-0"]
    assert all(f.path.startswith("s3://") == root.startswith("s3://") for f in files)

    log = storage.join(root, "t-0", "00000000000000000000.log")
    assert storage.exists(log) and not storage.exists(log + ".cleaned")
    assert storage.info(log).size == 10 and storage.info(log).mtime_ms > 0
    assert storage.read_bytes(log) == b"0123456789"
    assert storage.read_range(log, 3, 7) == b"3456"
    with storage.open_read(log) as f:
        f.seek(4)
        assert f.read(3) == b"456"


def test_rename_replaces_and_remove_deletes(root):
    src, dst = storage.join(root, "a.swap"), storage.join(root, "a.log")
    storage.write_durable(dst, b"old")
    storage.write_durable(src, b"new")
    storage.rename(src, dst)
    assert storage.read_bytes(dst) == b"new" and not storage.exists(src)
    storage.remove(dst)
    assert not storage.exists(dst)


def test_write_atomic_leaves_no_tmp(root):
    target = storage.join(root, "cleaner-offset-checkpoint")
    storage.write_atomic(target, b"0\n1\nt 0 5\n")
    storage.write_atomic(target, b"0\n1\nt 0 6\n")
    assert storage.read_bytes(target) == b"0\n1\nt 0 6\n"
    files, _ = storage.list_dir(root)
    assert [rel(f.path, root) for f in files] == ["cleaner-offset-checkpoint"]


def test_set_mtime_is_seen_by_listings(tmp_path):
    path = str(tmp_path / "00000000000000000000.log")
    storage.write_durable(path, b"x")
    storage.set_mtime(path, 1_600_000_000_250)
    assert storage.info(path).mtime_ms == 1_600_000_000_250
    assert storage.list_dir(str(tmp_path))[0][0].mtime_ms == 1_600_000_000_250


def test_tree_sizes_survive_the_seam(tmp_path):
    make_log_dir(tmp_path)
    part, _ = storage.list_dir(str(tmp_path / "orders-7"))
    sizes = {posixpath.basename(f.path): f.size for f in part}
    assert sizes == {rel_path.split("/", 1)[1]: size for rel_path, size in TREE.items() if rel_path.startswith("orders-7/")}

"""The storage seam: local paths and s3:// URLs (moto's S3 server) behave alike, and the
readers give the same answers over both."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import posixpath
import random
import uuid

import pytest

from kcompact import storage
from kcompact.logdir.listing import scan_log_dir
from kcompact.readers.segment import iter_batches
from tests.support import FIXTURE_INPUT, TREE, make_log_dir, pages_in_cache

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


def test_s3_errors_name_the_objects_url(s3):
    """s3fs names an object ``bucket/key`` or not at all (a GET of an archived object: a bare
    PermissionError); read through the seam, every error names its ``s3://`` URL, and so do the
    errors a job's task reports (``compaction.cleaning.results``, ``planner.scan``)."""
    from kcompact.compaction.cleaning.results import IO_ERROR, read_error, reason

    s3.pipe_file(f"{BUCKET}/named/x-0/00000000000000000000.log", b"x" * 100, StorageClass="GLACIER")
    archived, missing = (f"s3://{BUCKET}/named/x-0/00000000000000000{n}.log" for n in ("000", "123"))
    refused = f"{archived}: the operation is not valid for the object's storage class"
    for read in (lambda: storage.read_bytes(archived), lambda: storage.read_range(archived, 0, 10),
                 lambda: batches_of(archived)):
        with pytest.raises(PermissionError) as caught:
            read()
        assert storage.describe_error(caught.value) == refused
        assert reason(caught.value) == f"{IO_ERROR}{refused}"
        assert read_error(caught.value, f"s3://{BUCKET}/named/x-0") == f"unreadable (retried next run): {refused}"
    with pytest.raises(FileNotFoundError) as caught:
        storage.open_read(missing)
    assert storage.describe_error(caught.value).startswith(f"{missing}: no object at or under this path")
    # an error naming bucket/key itself takes the URL's form from a path of the same bucket
    assert storage.describe_error(FileNotFoundError(f"{BUCKET}/a/b"), f"s3://{BUCKET}/a").startswith(
        f"s3://{BUCKET}/a/b: ")
    assert storage.describe_error(OSError("other-bucket/k"), f"s3://{BUCKET}/a") == "other-bucket/k: I/O error"


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
    assert sizes == {
        rel_path.split("/", 1)[1]: size for rel_path, size in TREE.items() if rel_path.startswith("orders-7/")
    }


def test_a_tree_listing_is_the_listing_of_each_dir(tmp_path, s3):
    """``list_tree`` gives what ``list_dir`` of the root and of each partition dir give, locally and
    on S3 (there from one listing of every key)."""
    make_log_dir(tmp_path)
    s3.put(f"{tmp_path}/", f"{BUCKET}/tree/", recursive=True)
    for root in (str(tmp_path), f"s3://{BUCKET}/tree"):
        tree = storage.list_tree(root)
        files, dirs = storage.list_dir(root)
        expected = {root: files} | {d: storage.list_dir(d)[0] for d in dirs}
        assert {d: sorted((f.path, f.size) for f in fs) for d, fs in tree.items()} == \
            {d: sorted((f.path, f.size) for f in fs) for d, fs in expected.items() if fs}


# -- files written past the page cache ------------------------------------------------------------
def _write_in_pieces(path: str, data: bytes, seed: int, direct: bool = True) -> type:
    """``data`` through ``create_file`` in pieces of random sizes; the type of file it gave."""
    rng = random.Random(seed)
    with storage.create_file(path, direct) as f:
        kind, at = type(f), 0
        while at < len(data):
            n = rng.choice([1, 17, 4096, 5000, 1 << 20, storage.DIRECT_BUFFER + 3])
            assert f.write(data[at:at + n]) == len(data[at:at + n])
            at += n
    return kind


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, storage.DIRECT_BUFFER - 1, storage.DIRECT_BUFFER,
                                  2 * storage.DIRECT_BUFFER + 4096 + 5])
def test_direct_file_holds_every_byte(tmp_path, size):
    data = random.Random(size).randbytes(size)
    path = str(tmp_path / "00000000000000000000.log.cleaned")
    assert _write_in_pieces(path, data, seed=size) is storage.DirectFile  # this machine's file system takes O_DIRECT
    assert open(path, "rb").read() == data


def test_direct_file_leaves_the_page_cache_alone(tmp_path):
    """Every whole block goes past the cache; the last partial one (and a plain write) through it."""
    data = random.Random(0).randbytes(3 * storage.DIRECT_BUFFER + 100)
    direct, plain = str(tmp_path / "direct"), str(tmp_path / "plain")
    _write_in_pieces(direct, data, seed=1)
    assert _write_in_pieces(plain, data, seed=1, direct=False) is not storage.DirectFile
    cached, pages = pages_in_cache(direct)
    assert pages == 3 * storage.DIRECT_BUFFER // mmap.PAGESIZE + 1 and cached <= 1
    assert pages_in_cache(plain) == (pages, pages)
    assert open(direct, "rb").read() == open(plain, "rb").read() == data


def test_direct_file_where_the_file_system_refuses_o_direct(tmp_path, monkeypatch):
    """open(2) says EINVAL (tmpfs before Linux 6.6, some FUSE file systems): an ordinary file."""
    real_open = os.open

    def no_direct(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_direct)
    data = random.Random(1).randbytes(storage.DIRECT_BUFFER + 7)
    path = str(tmp_path / "a.log")
    assert _write_in_pieces(path, data, seed=2) is not storage.DirectFile
    assert open(path, "rb").read() == data


def test_direct_file_goes_on_through_the_cache_when_a_write_is_refused(tmp_path, monkeypatch):
    """A file system that opens with O_DIRECT but refuses an aligned write: the rest is written
    through the page cache, every byte in place."""
    real_write, refused = os.write, []

    def refuse_direct(fd, data):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT and len(refused) < 1:
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", refuse_direct)
    data = random.Random(2).randbytes(3 * storage.DIRECT_BUFFER + 9)
    path = str(tmp_path / "a.log")
    assert _write_in_pieces(path, data, seed=3) is storage.DirectFile
    assert refused == [storage.DIRECT_BUFFER]
    assert open(path, "rb").read() == data


def test_direct_file_raises_other_errors_and_gives_its_buffer_back(tmp_path, monkeypatch):
    def disk_full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    path = str(tmp_path / "a.log")
    with storage.create_file(path, direct=True) as f:  # at least one buffer in the pool
        f.write(b"y")
    pooled, fds = storage.direct._DIRECT_BUFFERS.qsize(), len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(OSError, match="No space left"):
        _write_in_pieces(path, bytes(storage.DIRECT_BUFFER), seed=4)
    monkeypatch.undo()
    assert storage.direct._DIRECT_BUFFERS.qsize() == pooled and len(os.listdir("/proc/self/fd")) == fds
    with storage.create_file(path, direct=True) as f:  # a buffer from the pool, still usable
        f.write(b"x" * 5000)
    assert open(path, "rb").read() == b"x" * 5000

"""What each ``storage`` call costs an object store, counted where the requests arrive: the
session's S3 server (tests/s3server.py) counts them by operation as S3's REST API names them.
Truth: the operations a call must send at least (one GET for a read, one PUT for a write), and
the bytes the objects hold, written here by s3fs.
"""

from __future__ import annotations

import uuid

import pytest

from kcompact import storage
from kcompact.storage import objects


@pytest.fixture(scope="module")
def bucket(s3_server):
    import s3fs

    fs = s3fs.S3FileSystem(use_listings_cache=False)
    name = f"req-{uuid.uuid4().hex[:8]}"
    fs.mkdir(name)
    return fs, name


@pytest.fixture
def counted(s3_server):
    """The requests sent since the test began, or since ``counted(reset=True)``, by operation."""
    s3_server.reset()

    def requests(reset: bool = False) -> dict:
        if reset:
            s3_server.reset()
        return s3_server.snapshot()["requests"]

    return requests


def test_a_small_file_is_one_request_each_way(bucket, counted):
    _, name = bucket
    path = f"s3://{name}/small/state.json"
    version = storage.write_if(path, b"one", None)
    assert counted() == {"PUT": 1}
    assert storage.read_versioned(path) == (b"one", version)
    assert counted() == {"PUT": 1, "GET": 1}
    assert storage.write_if(path, b"two", version) not in (None, version)
    assert storage.write_if(path, b"three", version) is None  # the version moved on: another writer's
    assert storage.read_bytes(path) == b"two"
    assert counted()["PUT"] == 3 and counted()["GET"] <= 3 and "HEAD" not in counted() and "LIST" not in counted()


def test_a_conditional_write_that_meets_its_own_bytes_has_won(bucket):
    """A PUT retried after its answer was lost finds its first attempt there (412): that is ours."""
    _, name = bucket
    path = f"s3://{name}/retried/record.json"
    first = storage.write_if(path, b"record", None)
    assert storage.write_if(path, b"record", None) == first
    assert storage.write_if(path, b"another", None) is None


def test_a_missing_object_is_one_request_no_listing(bucket, counted):
    _, name = bucket
    assert storage.read_versioned(f"s3://{name}/nothing/here.json") is None
    with pytest.raises(FileNotFoundError):
        storage.info(f"s3://{name}/nothing/here.json")
    assert counted() == {"GET": 1, "HEAD": 1}


def test_a_listed_size_spares_the_head(bucket, counted):
    fs, name = bucket
    data = bytes(range(256)) * 1000
    fs.pipe_file(f"{name}/sized/00000000000000000000.log", data)
    counted(reset=True)
    files, _ = storage.list_dir(f"s3://{name}/sized")
    with storage.open_read(files[0].path, files[0].size) as f:
        f.seek(1000)
        assert f.read(5000) == data[1000:6000]
        assert f.read() == data[6000:]
    assert counted() == {"LIST": 1, "GET": 2}


def test_a_large_read_is_parallel_ranged_gets_of_at_least_8_mib(bucket, counted, s3_server):
    fs, name = bucket
    size = 5 * objects.PART + 12345  # the small rest joins the last part
    data = uuid.uuid4().bytes * (size // 16) + b"x" * (size % 16)
    fs.pipe_file(f"{name}/large/00000000000000000000.log", data)
    counted(reset=True)
    with storage.open_read(f"s3://{name}/large/00000000000000000000.log", size) as f:
        first = f.read(2 * objects.PART)  # a sequential reader: the next 2 parts are fetched ahead
        rest = f.read()
    assert first + rest == data
    assert counted() == {"GET": 5}
    assert s3_server.snapshot()["bytes_out"] == size  # nothing fetched twice


def test_deletes_go_1000_keys_a_request(bucket, counted):
    fs, name = bucket
    paths = [f"s3://{name}/many/{i:05d}.staged" for i in range(2100)]
    fs.pipe({p.removeprefix("s3://"): b"." for p in paths})
    counted(reset=True)
    storage.remove_many(paths + [f"s3://{name}/many/already-gone"])
    assert counted() == {"DELETE_BATCH": 3}
    assert fs.find(f"{name}/many") == []


def test_a_log_dir_is_listed_in_1000_keys_a_request(bucket, counted):
    fs, name = bucket
    fs.pipe(
        {f"{name}/tree/orders-{i % 7}/{i:020d}.log": b"." for i in range(2100)} | {f"{name}/tree/meta.properties": b"m"}
    )
    counted(reset=True)
    tree = storage.list_tree(f"s3://{name}/tree")
    assert counted() == {"LIST": 3}
    assert sorted(tree) == sorted([f"s3://{name}/tree"] + [f"s3://{name}/tree/orders-{i}" for i in range(7)])
    assert sum(len(files) for files in tree.values()) == 2101


def test_a_copy_is_one_request(bucket, counted):
    fs, name = bucket
    fs.pipe_file(f"{name}/copy/a.staged", b"abc")
    counted(reset=True)
    storage.copy(f"s3://{name}/copy/a.staged", f"s3://{name}/copy/a")
    assert counted() == {"COPY": 1}
    assert fs.cat_file(f"{name}/copy/a") == b"abc"

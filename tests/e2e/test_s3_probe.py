"""The start-up probe of an object store's conditional writes (storage/probe.py): a store that
ignores ``If-Match`` / ``If-None-Match`` on PUT is refused before anything is written, exit 2, in
one line that says why; a store that honours them costs one request per command.

The store without conditional writes is moto behind ``tests.s3server.CountingS3(conditional=False)``,
which drops the conditions before moto reads them: what such a store does, told by a server, not
by the code under test. The conforming stores are moto and SeaweedFS (``store``), whose 412s the
probe must read as such.
"""

from __future__ import annotations

import pytest

from kcompact.jobs import cli
from kcompact.storage import probe
from tests.s3server import CountingS3
from tests.stores import Store

BUCKET = "kc-probe"
NOW = "1720001000000"


@pytest.fixture(scope="module")
def unconditional():
    server = CountingS3(conditional=False).start()
    yield Store("no conditions", server, server.endpoint, "testing", "testing")
    server.stop()


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "logs"
    assert cli.main(["gen", "--out", str(out), "--seed", "7", "--partitions", "1", "-q"]) == 0
    return out


def upload(store: Store, local, prefix: str) -> tuple:
    fs = store.fs()
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    fs.put(f"{local}/", f"{BUCKET}/{prefix}/", recursive=True)
    return fs, f"s3://{BUCKET}/{prefix}"


def listing(fs, prefix: str) -> dict:
    return {p: fs.cat(p) for p in fs.find(f"{BUCKET}/{prefix}")}


def test_the_unconditional_store_really_ignores_conditions(unconditional):
    """The fixture is what it claims: a second create-only PUT of one key is written."""
    fs = unconditional.fs()
    fs.mkdir("kc-check")
    client = fs.call_s3
    client("put_object", Bucket="kc-check", Key="k", Body=b"1", IfNoneMatch="*")
    client("put_object", Bucket="kc-check", Key="k", Body=b"2", IfNoneMatch="*")
    assert fs.cat("kc-check/k") == b"2"


MUTATIONS = ("PUT", "COPY", "DELETE", "DELETE_BATCH", "MULTIPART")


def test_a_store_without_conditional_writes_is_refused_before_anything_is_written(unconditional, gen, capsys):
    """The nightly job and a state command (every command that writes asks, jobs/arguments.py), in
    this process (the command line's own exit code and stderr line): refused, the bucket as it
    was, the probe's two requests the only writes."""
    fs, url = upload(unconditional, gen, "refused")
    before = listing(fs, "refused")
    with unconditional.installed():
        for command, args in {"run": ["--now", NOW], "pause": ["orders-0"]}.items():
            probe._answers.clear()
            unconditional.counter.reset()
            assert cli.main([command, url, *args]) == 2, command
            err = capsys.readouterr().err
            line = err.strip().splitlines()[-1]
            assert line.startswith(f"kcompact: object store refused: {url}: {unconditional.endpoint} ignores "
                                   "conditional writes"), line
            assert "If-None-Match" in line and "docs/deployment.md" in line and "Traceback" not in err
            assert listing(fs, "refused") == before, command  # no .lock, no state, no probe left
            requests = unconditional.counter.snapshot()["requests"]
            writes = {op: n for op, n in requests.items() if op in MUTATIONS}
            assert writes == {"PUT": 1, "DELETE": 1}, (command, requests)  # the probe, and its removal
        probe._answers.clear()


def test_the_probe_costs_one_request_per_store_and_process(store, gen):
    fs, url = upload(store, gen, "probe")
    with store.installed():
        probe._answers.clear()
        store.counter.reset()
        assert probe.conditional_writes(url) is None
        assert probe.conditional_writes(url) is None  # answered from the cache
        assert probe.conditional_writes(f"{url}/orders-0") is None  # the same bucket of the same store
        requests = store.counter.snapshot()["requests"]
    assert requests == {"PUT": 1}, requests
    assert not [p for p in fs.find(f"{BUCKET}/probe") if "kcompact-probe." in p]


def test_the_probe_of_an_unconditional_store_is_cached_too(unconditional, gen):
    _, url = upload(unconditional, gen, "cached")
    with unconditional.installed():
        probe._answers.clear()
        unconditional.counter.reset()
        first = probe.conditional_writes(url)
        assert first is not None and "ignores conditional writes" in first
        assert probe.conditional_writes(url) == first
        requests = unconditional.counter.snapshot()["requests"]
        probe._answers.clear()
    assert requests == {"PUT": 1, "DELETE": 1}, requests

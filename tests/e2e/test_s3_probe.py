"""The probe of an object store's conditional writes (storage/probe.py): a store that ignores
``If-Match`` or ``If-None-Match`` on PUT (either one alone too) is refused before anything is
written, by the command line (exit 2, one line that says why) and by the public API
(``errors.NoConditionalWrites``, Spark never asked); a store that honours both costs two requests
per process (three at a log dir's first probe, which makes the empty ``kcompact-probe``).

The stores without conditional writes are moto behind ``tests.s3server.CountingS3``, which drops
the conditions (both, or one) before moto reads them: what such a store does, told by a server,
not by the code under test. The conforming stores are moto and SeaweedFS (``store``), whose 412s
the probe must read as such.
"""

from __future__ import annotations

import pytest

import kcompact
from kcompact import errors
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


def bare(store: Store, prefix: str) -> tuple:
    """A log dir of one file, for what needs no partitions: the probe asks only its store."""
    fs = store.fs()
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    fs.pipe(f"{BUCKET}/{prefix}/meta.properties", b"version=1\n")
    return fs, f"s3://{BUCKET}/{prefix}"


@pytest.fixture(scope="module")
def refused(unconditional, gen):
    """The generated log dir on the store without conditions, and its objects: every refusal
    must leave them so."""
    fs, url = upload(unconditional, gen, "refused")
    return fs, url, listing(fs, "refused")


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
REFUSED_WRITES = {"PUT": 3, "DELETE": 1}  # the probe's three questions, and the removal of its object


def writes(store: Store) -> dict:
    return {op: n for op, n in store.counter.snapshot()["requests"].items() if op in MUTATIONS}


def test_a_store_without_conditional_writes_is_refused_before_anything_is_written(unconditional, refused, capsys):
    """The nightly job and a state command (every command that writes asks, jobs/arguments.py), in
    this process (the command line's own exit code and stderr line): refused, the bucket as it
    was, the probe's requests the only writes."""
    fs, url, before = refused
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
            assert writes(unconditional) == REFUSED_WRITES, command
        probe._answers.clear()


class NoSpark:
    """A session that records what is asked of it: a refused store must be refused first."""

    def __init__(self):
        self.asked: list[str] = []

    def __getattr__(self, name: str):
        self.asked.append(name)
        raise AttributeError(name)


def test_the_api_refuses_a_store_without_conditional_writes_before_anything_is_written(unconditional, refused):
    """``kcompact.compact``, ``retain``, ``run`` and ``recover`` on the store raise the command
    line's error (exit 2's class), before they ask Spark for anything or write anything; a dry
    run writes nothing, so it does not ask."""
    fs, url, before = refused
    calls = {"compact": lambda spark: kcompact.compact(spark, [url], now=int(NOW)),
             "retain": lambda spark: kcompact.retain(spark, [url], now=int(NOW)),
             "run": lambda spark: kcompact.run(spark, [url], now=int(NOW)),
             "recover": lambda spark: kcompact.recover([url])}
    with unconditional.installed():
        for name, call in calls.items():
            probe._answers.clear()
            unconditional.counter.reset()
            spark = NoSpark()
            with pytest.raises(errors.NoConditionalWrites) as refused:
                call(spark)
            assert refused.value.exit_code == errors.EXIT_USAGE, name
            assert str(refused.value).startswith(f"{url}: {unconditional.endpoint} ignores conditional writes"), name
            assert spark.asked == [], (name, spark.asked)
            assert listing(fs, "refused") == before, name
            assert writes(unconditional) == REFUSED_WRITES, name
        probe._answers.clear()
        unconditional.counter.reset()
        with pytest.raises(AttributeError):  # past the probe: the dry run goes on to Spark
            kcompact.compact(NoSpark(), [url], now=int(NOW), dry_run=True)
        assert writes(unconditional) == {}
    probe._answers.clear()


@pytest.mark.parametrize("ignored", ["If-None-Match", "If-Match"])
def test_a_store_that_ignores_one_condition_is_refused_too(ignored):
    """A store that checks one condition and not the other (the lease and commit protocol use
    both, storage/cas.py): refused, the ignored one named."""
    server = CountingS3(ignores=(ignored,)).start()
    try:
        store = Store(f"no {ignored}", server, server.endpoint, "testing", "testing")
        fs, url = bare(store, "one")
        before = listing(fs, "one")
        with store.installed():
            probe._answers.clear()
            store.counter.reset()
            why = probe.conditional_writes(url)
            probe._answers.clear()
        assert why is not None and "ignores conditional writes" in why, why
        named = why.split(" was written")[0]
        assert (f"a PUT with {ignored}" in named) and named.count("a PUT with") == 1, why
        assert writes(store) == REFUSED_WRITES
        assert listing(fs, "one") == before
    finally:
        server.stop()


def test_the_probe_costs_two_requests_per_store_and_process(store):
    """Both conditions asked of the one object, which stays, empty: three PUTs at a log dir's first
    probe, two in each later process, none more in one process (the command line's check, then the
    API's steps), nothing else written."""
    fs, url = bare(store, "probe")
    before = listing(fs, "probe")
    with store.installed():
        seen = []
        for _ in range(2):  # two processes, as the answers kept say
            probe._answers.clear()
            store.counter.reset()
            assert probe.conditional_writes(url) is None
            assert probe.conditional_writes(url) is None  # answered from the cache
            assert probe.conditional_writes(f"{url}/orders-0") is None  # the same bucket of the same store
            kcompact.recover([url], progress=lambda line: None)  # the API asks the cache too
            seen.append({op: n for op, n in store.counter.snapshot()["requests"].items() if op in ("PUT", "DELETE")})
    assert seen == [{"PUT": 3}, {"PUT": 2}], seen
    after = listing(fs, "probe")
    assert after.pop(f"{BUCKET}/probe/{probe.PROBE}") == b""
    assert {k: v for k, v in after.items() if not k.endswith("/.lock")} == before  # recover takes the lock


def test_the_probe_of_an_unconditional_store_is_cached_too(unconditional):
    _, url = bare(unconditional, "cached")
    with unconditional.installed():
        probe._answers.clear()
        unconditional.counter.reset()
        first = probe.conditional_writes(url)
        assert first is not None and "ignores conditional writes" in first
        assert "If-None-Match" in first and "If-Match of" in first  # both ignored, both named
        assert probe.conditional_writes(url) == first
        requests = unconditional.counter.snapshot()["requests"]
        probe._answers.clear()
    assert requests == REFUSED_WRITES, requests

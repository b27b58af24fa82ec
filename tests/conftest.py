"""Session fixtures shared by the tests; builders and readers are in tests/support.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# -- tiers: the folder a test file is in marks its tests ------------------------------------------
# tests/unit (no Spark, no whole command: make test-fast), tests/spark (the session's Spark),
# tests/e2e (whole commands, subprocesses, faults, cluster, notebook, Chromium); see setup.cfg.
TIERS = {"spark": pytest.mark.spark, "e2e": pytest.mark.e2e}
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        folders = item.path.resolve().parents
        for tier, mark in TIERS.items():
            if HERE / tier in folders:
                item.add_marker(mark)


# -- one name per module: kcompact.<layer>, never the bare folder ---------------------------------
LAYERS = {p.name for p in HERE.parent.iterdir() if (p / "__init__.py").is_file()} - {"kcompact", "tests"}


@pytest.fixture(scope="session", autouse=True)
def one_name_per_module():
    """Fail the run if any module was imported under a bare layer name (``readers.batch`` beside
    ``kcompact.readers.batch``: the repository root on sys.path makes that possible, and the module
    would then exist twice, with two copies of its state and its classes)."""
    import sys

    yield
    bare = sorted(name for name in sys.modules if name.partition(".")[0] in LAYERS)
    assert not bare, f"modules imported under a bare layer name (import kcompact.<layer>): {', '.join(bare[:10])}"


# -- S3 through moto's server mode --------------------------------------------------------
@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on 127.0.0.1 that counts the requests it serves (tests/s3server.py); every
    ``s3://`` path of this session talks to it."""
    import fsspec
    import s3fs

    from tests.s3server import CountingS3

    server = CountingS3().start()
    saved = fsspec.config.conf.get("s3")
    fsspec.config.conf["s3"] = {"client_kwargs": {"endpoint_url": server.endpoint},
                                "key": "testing", "secret": "testing"}
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield server
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        if saved is None:
            fsspec.config.conf.pop("s3", None)
        else:
            fsspec.config.conf["s3"] = saved
        server.stop()


@pytest.fixture(scope="session")
def s3_endpoint(s3_server):
    """The URL of the session's S3 server."""
    return s3_server.endpoint


# -- S3 on a real server: SeaweedFS ------------------------------------------------------------------
@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """SeaweedFS on 127.0.0.1 (tests/seaweedfs.py), started once for the session, behind a proxy
    that counts its requests (``seaweedfs.proxy``). Its own credentials: unlike moto, it checks
    them. Nothing of this session's fsspec configuration points at it (``Store.installed`` does)."""
    from tests.seaweedfs import CountingProxy, SeaweedFS

    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs")).start()
    server.proxy = CountingProxy(server.s3).start()
    try:
        yield server
    finally:
        server.proxy.stop()
        server.stop()


@pytest.fixture(scope="module", params=["moto", "seaweedfs"])
def store(request):
    """The S3 server of a test that runs on both: moto (a mock in this process) and SeaweedFS (a
    real server)."""
    from tests.stores import Store

    if request.param == "moto":
        server = request.getfixturevalue("s3_server")
        return Store("moto", server, server.endpoint, "testing", "testing")
    from tests.seaweedfs import ACCESS_KEY, SECRET_KEY

    server = request.getfixturevalue("seaweedfs")
    return Store("seaweedfs", server.proxy, server.proxy.endpoint, ACCESS_KEY, SECRET_KEY)


# -- a live process of this host (a lease holder that still runs) ------------------------------------
@pytest.fixture
def live_child():
    """A live process of this host, started before the lease it is said to hold."""
    import subprocess

    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


# -- the embedded JVM's output of the kcompact processes the tests start ------------------------------
@pytest.fixture(scope="session", autouse=True)
def spark_log(tmp_path_factory):
    """One file under the run's temp dir for the JVM output of every kcompact command the tests run
    (jobs.spark keeps a failed command's log, and a killed one cannot remove its own)."""
    import os

    path = tmp_path_factory.mktemp("spark-log") / "kcompact-spark.log"
    saved = os.environ.get("KCOMPACT_SPARK_LOG")
    os.environ["KCOMPACT_SPARK_LOG"] = str(path)
    yield path
    if saved is None:
        os.environ.pop("KCOMPACT_SPARK_LOG", None)
    else:
        os.environ["KCOMPACT_SPARK_LOG"] = saved


# -- one SparkSession for the whole run ------------------------------------------------------------
@pytest.fixture(scope="session")
def spark():
    """Local Spark on 2 cores, started once: each start costs seconds. Executors run this
    interpreter (PYSPARK_PYTHON), which has the project installed."""
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from kcompact.jobs import cds
    from kcompact.jobs.spark import WORKER_DAEMON

    session = (SparkSession.builder.master("local[2]").appName("kcompact-tests")
               .config("spark.driver.extraJavaOptions", cds.java_options())  # the jobs' class-data archive
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.python.daemon.module", WORKER_DAEMON)
               .config("spark.sql.shuffle.partitions", "4")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_s3(spark, s3_endpoint):
    """The test session's Spark, its Python workers pointed at moto (a registration of the
    environment starts workers of their own), for jobs run in this process."""
    import fsspec

    environment = spark.sparkContext.environment
    environment["FSSPEC_S3"] = json.dumps(fsspec.config.conf["s3"])
    yield spark
    del environment["FSSPEC_S3"]

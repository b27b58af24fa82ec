"""What a night meets around the data (issue 26, items 5 and 7), as an operator's shell meets it:
``kcompact`` in a process of its own, its environment as a scheduler would set it.

A Python worker capped below what its imports take, embedded Spark sized with a typo, an object
store nobody answers at, credentials missing or refused: each is configuration, so each must end
within a bounded time in exit 2 and one line that names the setting, flag, variable, endpoint or
bucket, with nothing written (files compared byte for byte) and, where the input says so before
Spark starts, no JVM started (no Spark log). The messages themselves, and the botocore errors moto
cannot make, are unit-tested in tests/unit/test_environment_errors.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kcompact.compaction.pipeline.routing import WORKER_IMPORTS
from tests.support import kp_keyed, write_partition

NOW = 1_720_300_000_000
TS = NOW - 3_600_000
COMPACT = ["--now", str(NOW), "--topic-config", "*:cleanup.policy=compact"]
ROOT = Path(__file__).resolve().parents[2]
WORKER_IMPORTS_MIB = WORKER_IMPORTS >> 20
BUCKET = "kc-environment"


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def logs(tmp_path) -> Path:
    """A log dir with a partition to clean: 0..2 a a b | active 3 c."""
    write_partition(tmp_path / "logs" / "orders-0",
                    [(0, [kp_keyed(0, [b"a", b"a", b"b"], TS)]), (3, [kp_keyed(3, [b"c"], TS)])])
    return tmp_path / "logs"


def kcompact(
    *args: str, env: dict | None = None, timeout: float = 300, clean: bool = False
) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr, seconds) of ``kcompact ARGS``; ``clean``: without this session's
    AWS_*/KCOMPACT_* variables, the rest of the environment as it is."""
    base = {k: v for k, v in os.environ.items() if not (clean and k.startswith(("AWS_", "KCOMPACT_", "FSSPEC_")))}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kcompact.jobs.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env=base | (env or {}), timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- item 1: a worker cap that cannot hold the imports ------------------------------------------------
@pytest.mark.parametrize("cap", ["10m", "512m"])
def test_a_worker_cap_below_the_imports_is_refused_before_spark_starts(logs, tmp_path, cap):
    """Was: 10m looped for ten minutes (workers failing on ENOMEM, started again), 512m ended in
    'internal error: PythonException' (exit 3). The cap is refused as it is parsed."""
    before, log = files(logs), tmp_path / "spark.log"
    code, out, err, took = kcompact("compact", str(logs), *COMPACT, "--spark-conf",
                                    f"spark.executor.pyspark.memory={cap}", env={"KCOMPACT_SPARK_LOG": str(log)},
                                    timeout=120)
    assert code == 2, (code, out, err)
    assert f"spark.executor.pyspark.memory={cap}" in err and f"{WORKER_IMPORTS_MIB} MiB" in err, err
    assert "internal error" not in err and "Traceback" not in err, err
    assert not log.exists(), "a JVM was started"
    assert files(logs) == before
    assert took < 60, took


def test_a_worker_cap_that_holds_the_imports_but_no_cleaning_is_refused_and_the_advice_works(logs, tmp_path):
    """Was (issue 33 item 2): 600m passed the check, then every partition failed out of memory on
    every run (the first offset table could not be allocated). Refused up front naming the least
    cap that cleans; run again with that cap, the job cleans."""
    from kcompact.compaction.pipeline.routing import MIN_WORKER_MEMORY

    before, log = files(logs), tmp_path / "spark.log"
    code, out, err, _ = kcompact("compact", str(logs), *COMPACT, "--spark-conf", "spark.executor.pyspark.memory=600m",
                                 env={"KCOMPACT_SPARK_LOG": str(log)}, timeout=300)
    assert code == 2, (code, out, err)
    advice = re.search(r"give it at least (\d+m)", err)
    assert advice and advice[1] == f"{MIN_WORKER_MEMORY >> 20}m", err
    assert not log.exists(), "a JVM was started"
    assert files(logs) == before
    code, out, err, _ = kcompact("compact", str(logs), *COMPACT, "--spark-conf",
                                 f"spark.executor.pyspark.memory={advice[1]}", timeout=300)
    assert code == 0, (code, out, err)
    assert "1 partition: 1 cleaned" in out, out


def test_a_worker_cap_from_the_environment_is_refused_before_spark_starts(logs, tmp_path):
    before, log = files(logs), tmp_path / "spark.log"
    code, out, err, _ = kcompact("compact", str(logs), *COMPACT, timeout=180, env={
        "KCOMPACT_SPARK_LOG": str(log), "KCOMPACT_SPARK_CONF": "spark.executor.pyspark.memory=512m"})
    assert code == 2, (code, out, err)
    line = one_line(err)
    assert "KCOMPACT_SPARK_CONF" in line and "spark.executor.pyspark.memory=512m" in line, line
    assert f"{WORKER_IMPORTS_MIB} MiB" in line, line
    assert not log.exists(), "a JVM was started"
    assert files(logs) == before


def test_a_worker_cap_in_the_sessions_conf_is_refused_before_any_task(logs, tmp_path):
    """spark-submit's --conf (here: spark-defaults.conf, which spark-submit reads for embedded Spark
    too) reaches the session unchecked: refused as the session starts, before any task runs."""
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.executor.pyspark.memory 512m\n")
    before, log = files(logs), tmp_path / "spark.log"
    code, out, err, _ = kcompact("compact", str(logs), *COMPACT, timeout=300,
                                 env={"KCOMPACT_SPARK_LOG": str(log), "SPARK_CONF_DIR": str(conf_dir)})
    assert code == 2, (code, out, err)
    line = one_line(err)
    assert "spark.executor.pyspark.memory=512m" in line and f"{WORKER_IMPORTS_MIB} MiB" in line, line
    assert "stage 1/" not in out, out
    assert "Exception in task" not in log.read_text()  # no task ran
    assert files(logs) == before


# -- item 2: bad sizing before Spark starts ---------------------------------------------------------
@pytest.mark.parametrize(("flags", "env", "names"), [
    (["--driver-memory", "1x"], {}, "--driver-memory 1x"),
    ([], {"KCOMPACT_DRIVER_MEMORY": "1x"}, "KCOMPACT_DRIVER_MEMORY=1x"),
    ([], {"KCOMPACT_CORES": "abc"}, "KCOMPACT_CORES=abc"),
    ([], {"KCOMPACT_CORES": "0"}, "KCOMPACT_CORES=0"),
    ([], {"KCOMPACT_SPARK_CONF": "spark.sql.shuffle.partitions"}, "KCOMPACT_SPARK_CONF"),
], ids=["driver-memory", "env-driver-memory", "env-cores", "env-cores-zero", "env-spark-conf"])
@pytest.mark.parametrize("command", ["compact", "plan"])
def test_bad_sizing_is_refused_before_spark_starts(logs, tmp_path, command, flags, env, names):
    """Was: --driver-memory 1x 'internal error: ... JAVA_GATEWAY_EXITED' (exit 3), KCOMPACT_CORES=abc
    'invalid literal for int() with base 10', KCOMPACT_CORES=0 all the cores."""
    before, log = files(logs), tmp_path / "spark.log"
    code, out, err, _ = kcompact(command, str(logs), *COMPACT, *flags, env={"KCOMPACT_SPARK_LOG": str(log), **env},
                                 clean=True)
    assert code == 2, (code, out, err)
    line = one_line(err)
    assert line.startswith(f"kcompact: {names}"), line
    assert not log.exists(), "a JVM was started"
    assert files(logs) == before


# -- item 3: an object store nobody answers at -------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_env(endpoint: str, **more: str) -> dict:
    return {"FSSPEC_S3": json.dumps({"client_kwargs": {"endpoint_url": endpoint}}), "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"} | more


@pytest.fixture
def unanswered():
    """An endpoint that takes no connection: its listen queue is full, so a connect waits for its timeout."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    fill = []
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(server.getsockname())
        fill.append(c)
    time.sleep(0.2)
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    for c in fill:
        c.close()
    server.close()


@pytest.mark.parametrize("command", [["verify"], ["compact", *COMPACT]], ids=lambda c: c[0])
def test_an_endpoint_refusing_connections_is_a_connection_problem(tmp_path, command):
    """Was: 'internal error: EndpointConnectionError' (exit 3)."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    code, out, err, took = kcompact(command[0], f"s3://{BUCKET}/logs", *command[1:], timeout=120, clean=True,
                                    env=s3_env(endpoint, KCOMPACT_SPARK_LOG=str(tmp_path / "spark.log")))
    assert code == 2, (code, out, err)
    line = one_line(err)
    assert line.startswith(f"kcompact: error: s3://{BUCKET}: cannot connect to the object store at {endpoint} "), line
    assert took < 60, took
    assert not (tmp_path / "spark.log").exists()


def test_an_endpoint_that_never_answers_ends_within_a_minute(tmp_path, unanswered):
    """botocore's connect timeout (s3fs: 5 s) and its attempts (5) bound the first request; the
    first failure ends the command."""
    code, out, err, took = kcompact("compact", f"s3://{BUCKET}/logs", *COMPACT, timeout=150, clean=True,
                                    env=s3_env(unanswered, KCOMPACT_SPARK_LOG=str(tmp_path / "spark.log")))
    assert code == 2, (code, out, err)
    line = one_line(err)
    assert f"s3://{BUCKET}: cannot connect to the object store at {unanswered} (no answer" in line, line
    assert took < 75, took


# -- item 4: credentials missing or refused -----------------------------------------------------------
@pytest.fixture(scope="module")
def bucket(s3_endpoint):
    """A log dir in a bucket of the session's moto server."""
    import fsspec

    fs = fsspec.filesystem("s3")
    fs.mkdir(BUCKET)
    fs.pipe(f"{BUCKET}/logs/cleaner-offset-checkpoint", b"0\n0\n")
    return s3_endpoint


def no_credentials(tmp_path: Path, endpoint: str) -> dict:
    """No key anywhere botocore looks: environment, shared files, instance metadata."""
    (tmp_path / "aws-credentials").write_text("")
    (tmp_path / "aws-config").write_text("")
    return {"FSSPEC_S3": json.dumps({"client_kwargs": {"endpoint_url": endpoint}}),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials"),
            "AWS_CONFIG_FILE": str(tmp_path / "aws-config"), "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_DEFAULT_REGION": "us-east-1", "KCOMPACT_SPARK_LOG": str(tmp_path / "spark.log")}


@pytest.mark.parametrize("command", [["verify"], ["status"], ["compact", *COMPACT]], ids=lambda c: c[0])
def test_missing_credentials_name_the_bucket(tmp_path, bucket, command):
    """Was: 'internal error: NoCredentialsError: Unable to locate credentials' (exit 3)."""
    code, out, err, took = kcompact(command[0], f"s3://{BUCKET}/logs", *command[1:], timeout=120, clean=True,
                                    env=no_credentials(tmp_path, bucket))
    assert code == 2, (code, out, err)
    line = one_line(err)
    assert line.startswith(f"kcompact: error: s3://{BUCKET}: no credentials for the object store"), line
    assert "AWS_ACCESS_KEY_ID" in line, line
    assert took < 60, took
    assert not (tmp_path / "spark.log").exists()


@pytest.fixture(scope="module")
def strict_store(tmp_path_factory):
    """A moto server of its own that authenticates every request (the session's takes any key)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {"INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("command", [["verify"], ["compact", *COMPACT]], ids=lambda c: c[0])
def test_an_unknown_access_key_names_the_bucket(tmp_path, strict_store, command):
    """Was: 'error: Forbidden: permission denied': no bucket, no hint which credential."""
    code, out, err, took = kcompact(command[0], f"s3://{BUCKET}/logs", *command[1:], timeout=120, clean=True,
                                    env=s3_env(strict_store, AWS_ACCESS_KEY_ID="AKIANOTAKEY",
                                               KCOMPACT_SPARK_LOG=str(tmp_path / "spark.log")))
    assert code == 2, (code, out, err)
    line = one_line(err)
    assert line.startswith(f"kcompact: error: s3://{BUCKET}: "), line
    assert "access key" in line and "AWS_ACCESS_KEY_ID" in line, line
    assert took < 60, took


# -- issue 33, item 7: the credential source actually used, and what is wrong with it -------------------
def test_fsspec_s3_that_is_not_json_is_named(tmp_path, bucket):
    """Was: 'no credentials for the object store: none in AWS_ACCESS_KEY_ID ...' (fsspec ignored
    the variable with a warning, so neither its endpoint nor its keys were used)."""
    env = no_credentials(tmp_path, bucket) | {"FSSPEC_S3": '{"client_kwargs": {endpoint_url: "' + bucket + '"}}'}
    code, out, err, _ = kcompact("verify", f"s3://{BUCKET}/logs", timeout=120, clean=True, env=env)
    assert code == 2, (code, out, err)
    line = one_line(err)
    assert "FSSPEC_S3 is not valid JSON" in line and "character 19" in line, line
    assert "no credentials" not in line and "AWS_ACCESS_KEY_ID" not in line, line


def test_a_refused_fsspec_key_is_named(tmp_path, strict_store):
    """Was: 'check AWS_ACCESS_KEY_ID or the profile in use' for a key given as FSSPEC_S3_KEY."""
    env = no_credentials(tmp_path, strict_store) | {"FSSPEC_S3_KEY": "AKIANOTAKEY", "FSSPEC_S3_SECRET": "nosecret"}
    code, out, err, _ = kcompact("verify", f"s3://{BUCKET}/logs", timeout=120, clean=True, env=env)
    assert code == 2, (code, out, err)
    line = one_line(err)
    assert line.startswith(f"kcompact: error: s3://{BUCKET}: "), line
    assert "access key" in line and "FSSPEC_S3_KEY" in line and "AWS_ACCESS_KEY_ID" not in line, line

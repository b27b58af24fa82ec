"""What a night meets around the data (issue 26, items 5 and 7), the parts that need no process of
their own: the one-line messages of storage errors a person can act on (an endpoint that cannot
be reached, credentials missing or refused), a Python worker's memory cap below what its imports
take, bad sizing of embedded Spark, and the exit codes ``jobs.cli`` gives them (2: configuration).

The botocore errors are built as botocore raises them and passed through s3fs's own translation
(``s3fs.errors.translate_boto_error``), so each is what a command meets; the whole commands
(moto's server, an endpoint nobody answers, a real JVM) are in tests/e2e/test_environment_errors.py.
"""

from __future__ import annotations

import fsspec.config
import pyarrow as pa
import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
)
from pyspark.errors import PythonException
from s3fs.errors import translate_boto_error

from kcompact import errors, storage
from kcompact.compaction.pipeline import routing, settings
from kcompact.conf.units import spark_size
from kcompact.jobs import cli
from kcompact.jobs.spark import Sizing
from kcompact.storage import listing

URLS = ["s3://nightly-logs/broker-1"]
WORKER_IMPORTS_MIB = routing.WORKER_IMPORTS >> 20
MIN_WORKER_MIB = routing.MIN_WORKER_MEMORY >> 20


def refused(code: str, message: str, operation: str = "ListObjectsV2") -> OSError:
    """A request the store refused, as s3fs raises it (an OSError whose cause is botocore's)."""
    return translate_boto_error(ClientError({"Error": {"Code": code, "Message": message}}, operation))


def one_line(text: str | None) -> str:
    assert text is not None and "\n" not in text and "Traceback" not in text, text
    return text


# -- storage errors as one line -------------------------------------------------------------------------
@pytest.mark.parametrize(("exc", "says"), [
    (NoCredentialsError(), ["no credentials", "AWS_ACCESS_KEY_ID"]),
    (PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"),
     ["incomplete credentials", "AWS_SECRET_ACCESS_KEY"]),
    (refused("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."),
     ["access key", "not known", "AWS_ACCESS_KEY_ID"]),
    (refused("SignatureDoesNotMatch", "The request signature we calculated does not match the signature you "
                                      "provided. Check your key and signing method."),
     ["secret key", "AWS_SECRET_ACCESS_KEY"]),
    (refused("AccessDenied", "Access Denied"), ["access denied", "may not"]),
    (refused("403", "Forbidden", "HeadObject"), ["refused", "access key", "secret key"]),  # a HEAD: no body, no code
    (refused("ExpiredToken", "The provided token has expired."), ["expired"]),
], ids=["none", "partial", "unknown-key", "wrong-secret", "access-denied", "forbidden-head", "expired"])
def test_credentials_refused_or_missing_are_one_line_naming_the_bucket(exc, says, monkeypatch):
    # credentials from botocore's chain: not the test session's moto keys in fsspec's configuration
    monkeypatch.delitem(fsspec.config.conf, "s3", raising=False)
    for name in ("FSSPEC_S3", "FSSPEC_S3_KEY", "FSSPEC_S3_SECRET", "FSSPEC_S3_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    line = one_line(storage.describe_failure(exc, URLS))
    assert line.startswith("s3://nightly-logs: "), line
    for words in says:
        assert words in line, (words, line)


@pytest.mark.parametrize(("exc", "says"), [
    (EndpointConnectionError(endpoint_url="http://127.0.0.1:9/nightly-logs/broker-1"), "could not connect"),
    (ConnectTimeoutError(endpoint_url="http://10.1.2.3:9000/nightly-logs/broker-1"), "no answer"),
], ids=["refused", "timed-out"])
def test_an_unreachable_endpoint_is_a_connection_problem_naming_it(exc, says):
    line = one_line(storage.describe_failure(exc, URLS))
    endpoint = exc.kwargs["endpoint_url"].rsplit("/nightly-logs", 1)[0]
    assert f"cannot connect to the object store at {endpoint} " in line and says in line, line
    assert "s3://nightly-logs" in line and "endpoint_url" in line, line


def test_a_connection_the_server_closed_unanswered_is_a_failure_of_storage():
    """A server that dies under a request (tests/e2e/test_s3_server_faults.py kills one): no bug."""
    exc = ConnectionClosedError(endpoint_url="http://127.0.0.1:9/nightly-logs/broker-1/kcompact-commit.t-0.1.json")
    assert isinstance(storage.failures.as_storage_error(exc), errors.StorageError)
    line = one_line(storage.describe_failure(exc, URLS))
    assert line.startswith("s3://nightly-logs: the object store at http://127.0.0.1:9 closed the connection "), line
    assert "kcompact recover" in line, line


def test_other_errors_are_left_as_they_were():
    missing = FileNotFoundError(2, "No such file or directory", "/var/kafka/orders-0")
    assert storage.describe_failure(missing, URLS) == storage.describe_error(missing)
    assert storage.describe_failure(RuntimeError("a bug"), URLS) is None
    # a local permission problem keeps its own message (no bucket, no credentials)
    local = PermissionError(13, "Permission denied", "/var/kafka/.lock")
    assert storage.describe_failure(local, []) == "/var/kafka/.lock: permission denied"


def test_several_buckets_are_all_named():
    line = storage.describe_failure(NoCredentialsError(), ["s3://a/x", "--report=s3://b/r.json", "/local"])
    assert line.startswith("s3://a, s3://b: "), line


# -- what jobs.cli makes of them ------------------------------------------------------------------------
def failing(monkeypatch, exc: BaseException) -> None:
    """Every check passes and the command raises ``exc``: what _main says is left to test."""
    def command(args):
        raise exc

    monkeypatch.setattr(cli, "check", lambda args: None)
    monkeypatch.setitem(cli.COMMANDS, "status", command)


@pytest.mark.parametrize("exc", [
    NoCredentialsError(),
    EndpointConnectionError(endpoint_url="http://127.0.0.1:9/nightly-logs/broker-1"),
    refused("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."),
], ids=["no-credentials", "unreachable", "unknown-key"])
def test_the_command_line_says_one_line_and_exits_2(monkeypatch, capsys, exc):
    """The store's error is met inside the storage seam, which raises it as a StorageError: the
    command line decides on that class, not on botocore's or OSError."""
    class Store:
        def ls(self, path, detail=True):
            raise exc

    monkeypatch.setattr(listing, "resolve", lambda path: (Store(), path.removeprefix("s3://")))  # list_dir's
    monkeypatch.setattr(cli, "check", lambda args: None)
    monkeypatch.setitem(cli.COMMANDS, "status", lambda args: storage.list_dir(args.paths[0]))
    assert cli.main(["status", URLS[0]]) == errors.EXIT_USAGE
    err = capsys.readouterr().err
    assert one_line(err.strip()).startswith("kcompact: error: s3://nightly-logs"), err
    assert "internal error" not in err


@pytest.mark.parametrize("exc", [
    pa.ArrowInvalid("Column 2 named x expected length 3 but got length 2"),  # a ValueError
    KeyError("values"),
    OSError(5, "Input/output error"),  # not met through storage: raised by our code, a bug
    ValueError("too many values to unpack"),
    errors.KcompactError("caught by nobody"),
], ids=["arrow", "key", "os", "value", "root"])
def test_an_internal_bug_exits_3_whatever_builtin_it_is(monkeypatch, capsys, exc):
    failing(monkeypatch, exc)
    assert cli.main(["status", "/nowhere"]) == errors.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert one_line(err.strip()).startswith(f"kcompact: internal error: {type(exc).__name__}: "), err


@pytest.mark.parametrize(("exc", "code", "line"), [
    (errors.FormatError("/x/t-0/00000000000000000000.log", 61, "CRC mismatch"), 1,
     "kcompact: /x/t-0/00000000000000000000.log: byte 61: CRC mismatch"),
    (errors.BadArgument("--now -1: a time cannot be negative"), 2, "kcompact: --now -1: a time cannot be negative"),
    (errors.ConfigError("--topic-config: segment.bytes='abc'"), 2,
     "kcompact: configuration error: --topic-config: segment.bytes='abc'"),
    (errors.UsageError("p.json: not a plan"), 2, "kcompact: error: p.json: not a plan"),
    (errors.MissingFile(2, "No such file or directory", "/x/c.properties"), 2,
     "kcompact: error: /x/c.properties: no such file or directory"),
    (errors.OutOfMemory("a Spark task ran out of memory"), 2, "kcompact: error: a Spark task ran out of memory"),
    (errors.NoConditionalWrites("s3://b/l: http://s:9000 ignores conditional writes"), 2,
     "kcompact: object store refused: s3://b/l: http://s:9000 ignores conditional writes"),
], ids=["format", "argument", "config", "usage", "storage", "memory", "no conditional writes"])
def test_the_command_line_decides_on_the_class(monkeypatch, capsys, exc, code, line):
    failing(monkeypatch, exc)
    assert cli.main(["status", "/nowhere"]) == code == exc.exit_code
    assert one_line(capsys.readouterr().err.strip()) == line


class Tagged:
    """What ``steps._step`` asks of a session: tags for its jobs."""

    def addTag(self, tag): ...  # Spark's names
    def interruptTag(self, tag): ...
    def removeTag(self, tag): ...


@pytest.mark.parametrize("last", [
    "OSError: [Errno 12] Cannot allocate memory",
    "RuntimeError: mmap failed: ENOMEM",
    "MemoryError",
    "java.lang.OutOfMemoryError: Java heap space",
])
def test_a_spark_job_short_of_memory_ends_the_step_as_a_configuration_error(last):
    """A worker that ran out of memory (while importing, say) fails the Spark job, whose exception
    carries only the worker's traceback as text: the step says so by class."""
    from kcompact import steps

    worker = PythonException(
        "\n  An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "Traceback (most recent call last):\n  File \"pyspark/worker.py\", line 1883, in read_udfs\n"
        f"  File \"numba/__init__.py\", line 19, in <module>\n{last}\n")
    memory = r"spark\.executor\.pyspark\.memory"
    with pytest.raises(errors.OutOfMemory, match=memory) as caught, steps._step(Tagged(), "p"):
        raise worker
    assert caught.value.__cause__ is worker and caught.value.exit_code == errors.EXIT_USAGE
    with pytest.raises(ValueError, match="MemoryError"), steps._step(Tagged(), "p"):  # our own text: not Spark's
        raise ValueError("MemoryError in a message")


# -- a worker cap below its imports ---------------------------------------------------------------------
@pytest.mark.parametrize("cap", ["10m", "512m", "100", f"{WORKER_IMPORTS_MIB - 1}m", "0.5g",
                                 "600m", f"{MIN_WORKER_MIB - 1}m"])
def test_a_worker_cap_below_what_cleaning_takes_is_refused(cap):
    """600m holds the imports (560 MiB) but no partition's cleaning: every run failed out of
    memory (issue 33 item 2); refused, naming the least cap that cleans."""
    with pytest.raises(ValueError) as refusal:
        settings.check_setting("spark.executor.pyspark.memory", cap)
    text = str(refusal.value)
    assert f"spark.executor.pyspark.memory={cap}" in text and f"{WORKER_IMPORTS_MIB} MiB" in text, text
    assert f"give it at least {MIN_WORKER_MIB}m" in text, text


@pytest.mark.parametrize("cap", [f"{MIN_WORKER_MIB}m", "1g", "4096"])
def test_a_worker_cap_that_holds_a_cleaning_passes(cap):
    settings.check_setting("spark.executor.pyspark.memory", cap)


def _settings(cap: str | None, threads: int | None = None, cores: int = 16) -> settings.JobSettings:
    """A job's settings as ``JobSettings.of`` reads them from a session with these values."""
    return settings.JobSettings(map_memory=0, worker_cap=spark_size(cap) if cap else None, threads=threads,
                                cores=cores, direct_writes=True)


@pytest.mark.parametrize(("cap", "threads"), [(None, 16), ("700m", 1), ("839m", 1), ("840m", 2), ("1260m", 4),
                                              ("64g", 16)])
def test_a_capped_task_uses_the_threads_its_cap_holds(cap, threads):
    """Each thread beyond the first costs WHOLE_PER_THREAD of the cap: asked for or not, a task
    takes no more threads than the cap holds beside the least a cleaning takes."""
    assert _settings(cap).task_threads(1) == threads
    assert _settings(cap, threads=16).task_threads(1) == threads


def test_a_worker_cap_that_is_no_size_is_refused():
    with pytest.raises(ValueError, match=r"spark\.executor\.pyspark\.memory"):
        settings.check_setting("spark.executor.pyspark.memory", "lots")


class Conf:
    def __init__(self, values: dict[str, str]):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class Session:
    """What check_settings reads of a session: its conf (spark-submit's --conf, spark-defaults.conf)."""

    def __init__(self, values: dict[str, str]):
        self.conf = Conf(values)


def test_the_sessions_worker_cap_is_checked():
    """Under spark-submit the cap comes with the session, unchecked: refused before any task runs."""
    with pytest.raises(ValueError, match=f"{WORKER_IMPORTS_MIB} MiB"):
        settings.check_settings(Session({"spark.executor.pyspark.memory": "512m"}))
    settings.check_settings(Session({"spark.executor.pyspark.memory": "2g"}))


# -- sizing embedded Spark --------------------------------------------------------------------------------
@pytest.mark.parametrize(("env", "memory", "names"), [
    ({"KCOMPACT_CORES": "abc"}, None, "KCOMPACT_CORES"),
    ({"KCOMPACT_CORES": "0"}, None, "KCOMPACT_CORES"),
    ({"KCOMPACT_CORES": "-2"}, None, "KCOMPACT_CORES"),
    ({"KCOMPACT_DRIVER_MEMORY": "1x"}, None, "KCOMPACT_DRIVER_MEMORY"),
    ({"KCOMPACT_DRIVER_MEMORY": "2 g"}, None, "KCOMPACT_DRIVER_MEMORY"),
    ({}, "1x", "--driver-memory"),
    ({}, "512mb", "--driver-memory"),
    ({}, "1.5g", "--driver-memory"),
    ({}, "100m", "--driver-memory"),  # below the 450 MiB Spark's driver requires
    ({}, "512", "--driver-memory"),  # bytes, to the JVM
    ({"KCOMPACT_SPARK_CONF": "spark.sql.shuffle.partitions"}, None, "KCOMPACT_SPARK_CONF"),
    ({"KCOMPACT_SPARK_CONF": "spark.executor.pyspark.memory=10m"}, None, "KCOMPACT_SPARK_CONF"),
])
def test_bad_sizing_is_refused_naming_the_flag_or_variable(monkeypatch, env, memory, names):
    for key in ("KCOMPACT_CORES", "KCOMPACT_DRIVER_MEMORY", "KCOMPACT_SPARK_CONF"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError) as refusal:
        Sizing.from_env(driver_memory=memory)
    assert str(refusal.value).startswith(names), str(refusal.value)


@pytest.mark.parametrize("memory", ["450m", "2g", "2G", "1t", "4096m", "1048576k", "536870912"])
def test_jvm_sizes_pass(monkeypatch, memory):
    monkeypatch.setenv("KCOMPACT_DRIVER_MEMORY", memory)
    monkeypatch.setenv("KCOMPACT_CORES", "3")
    assert Sizing.from_env() == Sizing(3, memory)


# -- issue 33, item 7: the source of the credentials in use, and an FSSPEC_S3 fsspec ignored -------------
@pytest.mark.parametrize(("conf", "env", "files", "access", "secret"), [
    ({"key": "k", "secret": "s"}, {"FSSPEC_S3_KEY": "k"}, "", "check FSSPEC_S3_KEY", "check FSSPEC_S3_SECRET"),
    ({"key": "k", "secret": "s"}, {"FSSPEC_S3": '{"key": "k", "secret": "s"}'}, "", "check key in FSSPEC_S3",
     "check secret in FSSPEC_S3"),
    ({"client_kwargs": {"aws_access_key_id": "k"}}, {}, "", "check aws_access_key_id in FSSPEC_S3's client_kwargs",
     "check aws_secret_access_key in FSSPEC_S3's client_kwargs"),
    ({}, {"AWS_ACCESS_KEY_ID": "k"}, "", "check AWS_ACCESS_KEY_ID", "check AWS_SECRET_ACCESS_KEY"),
    ({}, {"AWS_PROFILE": "night"}, "[night]\naws_access_key_id = k\naws_secret_access_key = s\n",
     "check aws_access_key_id of profile night in ", "check aws_secret_access_key of profile night in "),
], ids=["fsspec-env", "fsspec-json", "client-kwargs", "aws-env", "profile"])
def test_a_refusal_names_the_credentials_in_use(monkeypatch, tmp_path, conf, env, files, access, secret):
    """Was: 'check AWS_ACCESS_KEY_ID or the profile in use' whatever gave the key."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "FSSPEC_S3", "FSSPEC_S3_KEY", "FSSPEC_S3_SECRET"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "credentials").write_text(files)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setitem(fsspec.config.conf, "s3", conf)
    unknown = one_line(storage.describe_failure(refused("InvalidAccessKeyId", "unknown"), URLS))
    wrong = one_line(storage.describe_failure(refused("SignatureDoesNotMatch", "no match"), URLS))
    assert access in unknown and secret in wrong, (unknown, wrong)
    if "AWS_" not in access:
        assert "AWS_" not in unknown + wrong, (unknown, wrong)


@pytest.mark.parametrize(("value", "says"), [
    ('{"client_kwargs": {endpoint_url: 1}}', "FSSPEC_S3 is not valid JSON (Expecting property name enclosed in "
                                              "double quotes at character 19)"),
    ('"http://127.0.0.1:9000"', "FSSPEC_S3 is JSON but not an object (str)"),
])
def test_an_fsspec_variable_fsspec_ignores_is_named(monkeypatch, value, says):
    monkeypatch.setenv("FSSPEC_S3", value)
    assert says in one_line(storage.environment_problem(["verify", "s3://b/logs"]))
    assert storage.environment_problem(["verify", "/var/kafka"]) is None  # no object store: no matter

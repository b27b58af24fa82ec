"""Operators first (issue 13, items 1, 2 and 4): every input checked before work, exit statuses
that tell the truth, messages a person can act on.

Each case is what an operator meets on a real night: an unmounted volume, a typo in a path or a
partition name, a clock in seconds, a garbage checkpoint, a partition left uncleanable. Expected
exit codes are the README's table (0 done, 1 bad input for verify and dump, 2 usage, 4 partial,
5 all failed); expected files are compared byte for byte before and after, so "nothing written"
is checked, not assumed.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kcompact.jobs.cli import main
from kcompact.planner.build import PLAN_SCHEMA
from tests.support import checkpoint_text, kp_keyed, write_partition

NOW = 1_720_300_000_000
TS = NOW - 3_600_000
COMPACT = ["--topic-config", "*:cleanup.policy=compact"]
EXPECTED = "expected a Kafka log dir"


def files(root: Path) -> dict[str, str]:
    """Every file under ``root`` (dot files too) and its content's hash."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def dirty(part: Path) -> Path:
    """0..2 a a b | active 3 c: the cleaner keeps 1 (a) and 2 (b)."""
    return write_partition(part, [(0, [kp_keyed(0, [b"a", b"a", b"b"], TS)]), (3, [kp_keyed(3, [b"c"], TS)])])


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- item 1: a path that is not a log dir is refused before anything is written ----------------------
def not_log_dirs(root: Path) -> dict[str, Path]:
    (root / "empty").mkdir()
    (root / "a-file").write_text("hello\n")
    (root / "etc-like").mkdir()
    (root / "etc-like" / "hosts").write_text("127.0.0.1 localhost\n")
    (root / "etc-like" / "ImageMagick-6").mkdir()  # a name like <topic>-<partition>, no segment in it
    (root / "etc-like" / "ImageMagick-6" / "policy.xml").write_text("<policymap/>\n")
    return {"missing": root / "nowhere", "file": root / "a-file", "empty dir": root / "empty",
            "other dir": root / "etc-like"}


COMMANDS = [["verify"], ["status"], ["recover"], ["plan", "--now", str(NOW)], ["compact", "--now", str(NOW)],
            ["retain", "--now", str(NOW)], ["run", "--now", str(NOW)]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_path_that_is_not_a_log_dir_is_refused_untouched(tmp_path, command, capsys):
    paths = not_log_dirs(tmp_path)
    for kind, path in paths.items():
        before = files(tmp_path)
        assert main([command[0], str(path), *command[1:]]) == 2, (command, kind)
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"kcompact: {path}: ") and EXPECTED in line, line
        assert files(tmp_path) == before, f"{command[0]} wrote into {kind}"  # no .lock, no state, no report
    assert not (paths["empty dir"] / ".lock").exists()


def test_state_command_on_a_path_that_is_not_a_log_dir(tmp_path, capsys):
    paths = not_log_dirs(tmp_path)
    assert main(["pause", str(paths["empty dir"]), "orders-0"]) == 2
    assert EXPECTED in one_line(capsys.readouterr().err)
    assert list(paths["empty dir"].iterdir()) == []


def test_a_log_dir_is_known_by_its_root_files_or_a_partition_dir():
    from kcompact.logdir.listing import not_a_log_dir

    assert not_a_log_dir(str(Path(__file__).parent.parent / "fixtures" / "kafka-written" / "input")) is None


# -- item 1: partial runs say which partitions and why, every run -------------------------------------
@pytest.fixture(scope="module")
def blocked(spark, tmp_path_factory):
    """A log dir whose cleaner-offset-checkpoint is garbage (every partition's plan is bad input), and
    one with a partition marked uncleanable beside a healthy one."""
    root = tmp_path_factory.mktemp("blocked")
    garbage = root / "garbage"
    dirty(garbage / "orders-0")
    dirty(garbage / "orders-1")
    (garbage / "cleaner-offset-checkpoint").write_text("garbage\n")
    marked = root / "marked"
    dirty(marked / "orders-0")
    dirty(marked / "orders-1")
    reason = f"{marked}/orders-1/00000000000000000000.log: byte 9: CRC mismatch"
    (marked / "kcompact-state.orders-1.json").write_text(json.dumps(
        {"state": "uncleanable", "reason": reason, "since_ms": NOW - 86_400_000}))
    return root, garbage, marked, reason


@pytest.mark.parametrize("command", ["compact", "run", "plan"])
def test_garbage_checkpoint_ends_partial_naming_every_partition(blocked, command, capsys):
    _, garbage, _, _ = blocked
    capsys.readouterr()
    assert main([command, str(garbage), "--now", str(NOW), *COMPACT]) == 4
    out = capsys.readouterr()
    said = out.out + out.err
    for name in ("orders-0", "orders-1"):
        line = next(line for line in said.splitlines() if re.search(rf"\b{name}: .*bad input", line))
        assert f"{garbage}/cleaner-offset-checkpoint: byte 0: unsupported checkpoint version 'garbage'" in line
    assert "Traceback" not in out.err


def test_uncleanable_partition_is_listed_every_run_until_reset(blocked, capsys):
    _, _, marked, reason = blocked
    for _ in range(2):  # every run, not only the one that marked it
        capsys.readouterr()
        assert main(["compact", str(marked), "--now", str(NOW), *COMPACT]) == 4
        out = capsys.readouterr().out.splitlines()
        assert f"uncleanable partitions: {marked}: 1 (orders-1)" in out
        line = next(line for line in out if line.startswith("  orders-1: "))
        assert reason in line and f"'kcompact reset-uncleanable {marked} orders-1'" in line
    assert main(["reset-uncleanable", str(marked), "orders-1"]) == 0
    capsys.readouterr()
    assert main(["compact", str(marked), "--now", str(NOW), *COMPACT]) == 0
    assert f"uncleanable partitions: {marked}: 0" in capsys.readouterr().out.splitlines()


def test_a_log_dir_without_partitions_ends_partial(spark, tmp_path, capsys):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "meta.properties").write_text("version=1\nnode.id=1\n")
    (log_dir / "recovery-point-offset-checkpoint").write_bytes(checkpoint_text([]))
    for command in ("compact", "retain", "run", "plan"):
        assert main([command, str(log_dir), "--now", str(NOW)]) == 4, command
        assert f"kcompact: {log_dir}: no partitions in this log dir: nothing to do" in capsys.readouterr().err


# -- item 2: outputs, names and numbers checked before work ------------------------------------------
def test_report_to_a_missing_directory_is_refused_before_the_job(tmp_path, capsys):
    dirty(tmp_path / "logs" / "orders-0")
    before = files(tmp_path)
    assert main(["compact", str(tmp_path / "logs"), "--report", str(tmp_path / "no" / "r.json"), *COMPACT]) == 2
    assert one_line(capsys.readouterr().err) == (f"kcompact: --report {tmp_path}/no/r.json: directory "
                                                 f"{tmp_path}/no does not exist")
    assert files(tmp_path) == before  # not even the .lock
    assert main(["compact", str(tmp_path / "logs"), "--report", str(tmp_path / "r.txt"), *COMPACT]) == 2
    assert "must end in .json" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("option, value, message", [
    ("--output", "plan.csv", "--output {}/plan.csv: the name must end in .parquet or .json"),
    ("--output", "gone/plan.json", "--output {}/gone/plan.json: directory {}/gone does not exist"),
    ("--plot", "plan.jpg", "--plot {}/plan.jpg: the name must end in .png"),
])
def test_plan_outputs_are_checked_before_planning(tmp_path, option, value, message, capsys):
    dirty(tmp_path / "logs" / "orders-0")
    assert main(["plan", str(tmp_path / "logs"), option, str(tmp_path / value)]) == 2
    assert one_line(capsys.readouterr().err) == "kcompact: " + message.format(tmp_path, tmp_path)


def test_compact_refuses_a_plan_made_for_other_log_dirs(tmp_path, capsys):
    dirty(tmp_path / "a" / "orders-0")
    dirty(tmp_path / "b" / "orders-0")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([dict.fromkeys(PLAN_SCHEMA.names) | {"log_dir": str(tmp_path / "a"),
                                                                      "path": str(tmp_path / "a" / "orders-0")}]))
    assert main(["compact", str(tmp_path / "b"), "--plan", str(plan)]) == 2
    assert f"was made for {tmp_path / 'a'}, not {tmp_path / 'b'}" in one_line(capsys.readouterr().err)


def test_a_plan_runs_under_any_name_of_its_log_dir(tmp_path, monkeypatch, capsys):
    """A plan made for ``logs`` from one working directory is taken by compact from another (a
    scheduler's), whatever the log dir is called there: absolutely, as ``./logs``, through a symlink."""
    dirty(tmp_path / "logs" / "orders-0")
    (tmp_path / "link").symlink_to(tmp_path / "logs")
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "logs", "--output", "plan.json", "--now", str(NOW), *COMPACT]) == 0
    planned = json.loads((tmp_path / "plan.json").read_text())
    assert {row["log_dir"] for row in planned} == {str(tmp_path / "logs")}
    assert {row["path"] for row in planned} == {str(tmp_path / "logs" / "orders-0")}
    (tmp_path / "elsewhere").mkdir()
    plan = str(tmp_path / "plan.json")
    for cwd, name in ((tmp_path, "./logs"), (tmp_path / "elsewhere", str(tmp_path / "logs") + "/")):
        monkeypatch.chdir(cwd)
        assert main(["compact", name, "--plan", plan, "--now", str(NOW), "--dry-run"]) == 0, capsys.readouterr().err
    monkeypatch.chdir(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["compact", "../link", "--plan", plan, "--now", str(NOW)]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "committed orders-0" in out and str(tmp_path / "logs") not in out  # named as this command names it
    assert (tmp_path / "logs" / "cleaner-offset-checkpoint").read_bytes() == checkpoint_text([("orders", 0, 3)])


@pytest.mark.parametrize("text, why", [("x\n", "(not JSON: "), ('{"a": 1}', "(not a list of partitions)"),
                                       ('[{"x": 1}]', "(a partition without its log dir)")])
def test_a_file_that_is_not_a_plan_is_named(tmp_path, text, why, capsys):
    dirty(tmp_path / "logs" / "orders-0")
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    assert main(["compact", str(tmp_path / "logs"), "--plan", str(plan)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"kcompact: error: {plan}: not a plan written by 'kcompact plan --output' {why}"), line


@pytest.mark.parametrize("command", ["pause", "resume", "abort", "reset-uncleanable"])
def test_state_commands_refuse_unknown_partitions(tmp_path, command, capsys):
    dirty(tmp_path / "orders-0")
    before = files(tmp_path)
    assert main([command, str(tmp_path), "orders-0", "ordres-0"]) == 2  # a typo: nothing at all is changed
    assert one_line(capsys.readouterr().err) == (f"kcompact: ordres-0: no such partition in {tmp_path} "
                                                 f"(see 'kcompact status {tmp_path} --all')")
    assert files(tmp_path) == before


@pytest.mark.parametrize("now, hint", [
    ("-1", "a time cannot be negative"),
    ("1720300000", "seconds? in milliseconds that is 1720300000000, 2024-07-06 21:06:40 UTC"),
    ("1720300000000000", "microseconds? in milliseconds that is 1720300000000, 2024-07-06 21:06:40 UTC"),
    ("17203", "a typo?"),
])
def test_implausible_now_is_refused_unless_forced(tmp_path, now, hint, capsys):
    dirty(tmp_path / "orders-0")
    before = files(tmp_path)
    for command in ("retain", "compact", "plan", "run"):
        assert main([command, str(tmp_path), "--now", now]) == 2
        assert hint in one_line(capsys.readouterr().err)
    assert files(tmp_path) == before


def test_forced_now_is_taken(spark, tmp_path, capsys):
    dirty(tmp_path / "orders-0")
    assert main(["plan", str(tmp_path), "--now", "1720300000", "--force-now", *COMPACT]) == 0


@pytest.mark.parametrize("args", [
    ["compact", "--lease-ms", "0"], ["compact", "--lease-ms", "-5"], ["run", "--lease-ms", "999"],
    ["compact", "--max-partitions", "-3"], ["run", "--max-partitions", "0"], ["plan", "--top", "0"],
    ["plan", "--max-bytes", "-1"], ["compact", "--cores", "0"],
])
def test_numbers_out_of_range_are_usage_errors(tmp_path, args, capsys):
    dirty(tmp_path / "orders-0")
    with pytest.raises(SystemExit) as exit_:
        main([args[0], str(tmp_path), *args[1:]])
    assert exit_.value.code == 2
    assert f"argument {args[1]}: " in capsys.readouterr().err


@pytest.mark.parametrize("setting, says", [
    ("spark.kcompact.write.direct=yes", "spark.kcompact.write.direct='yes': true or false"),
    ("spark.kcompact.threads=two", "spark.kcompact.threads='two': the threads of a task are a whole number"),
    ("spark.kcompact.map.memory=lots", "spark.kcompact.map.memory: 'lots' is not a size"),
    ("spark.kcompact.commit.threads=0", "spark.kcompact.commit.threads='0': the threads of a commit are a whole"),
])
def test_bad_job_settings_are_usage_errors(tmp_path, setting, says, capsys):
    dirty(tmp_path / "orders-0")
    with pytest.raises(SystemExit) as exit_:
        main(["compact", str(tmp_path), "--now", str(NOW), *COMPACT, "--spark-conf", setting])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


def test_bad_job_settings_from_the_session_are_refused_before_anything_is_written(spark, tmp_path, capsys):
    """spark-submit's --conf reaches the job without the command line's check: the job checks
    them itself, before it takes a lease."""
    dirty(tmp_path / "orders-0")
    before = files(tmp_path)
    spark.conf.set("spark.kcompact.write.direct", "sometimes")
    try:
        assert main(["compact", str(tmp_path), "--now", str(NOW), *COMPACT]) == 2
    finally:
        spark.conf.unset("spark.kcompact.write.direct")
    assert "spark.kcompact.write.direct='sometimes': true or false" in one_line(capsys.readouterr().err)
    assert files(tmp_path) == before


def test_config_file_errors_name_file_and_line(tmp_path, capsys):
    dirty(tmp_path / "logs" / "orders-0")
    config = tmp_path / "c.properties"
    config.write_text("# nightly settings\n\nlog.retention.hours=72\ntopic[orders].segment.bytes=abc\n")
    assert main(["plan", str(tmp_path / "logs"), "--config", str(config)]) == 2
    assert one_line(capsys.readouterr().err) == (
        f"kcompact: configuration error: {config}: line 4: segment.bytes='abc': "
        "must be a whole number between 14 and 2147483647"
    )
    config.write_text("log.cleaner.min.cleanable.ratio=0.3   # broker-level\n")
    assert main(["plan", str(tmp_path / "logs"), "--config", str(config)]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"{config}: line 1: log.cleaner.min.cleanable.ratio=" in line and "no comments after a value" in line


@pytest.mark.parametrize("command", ["plan", "compact", "retain", "run"])
def test_an_override_of_an_unknown_topic_is_refused_before_anything_is_written(tmp_path, command, capsys):
    dirty(tmp_path / "logs" / "orders-0")
    before = files(tmp_path)
    typo = ["--topic-config", "ordres:min.cleanable.dirty.ratio=0.01", "--now", str(NOW)]
    assert main([command, str(tmp_path / "logs"), *typo]) == 2
    assert one_line(capsys.readouterr().err) == (
        "kcompact: configuration error: --topic-config: no topic 'ordres' in the log dirs; did you mean 'orders'? "
        "(--allow-unknown-topics takes it as a topic that appears later)")
    assert files(tmp_path) == before
    if command == "plan":  # a topic named before it exists
        assert main([command, str(tmp_path / "logs"), *typo, "--allow-unknown-topics"]) == 0


def test_sample_properties_file_loads_as_documented():
    from kcompact.conf import resolve

    root = Path(__file__).resolve().parents[2]
    config = resolve.build(files=[str(root / "examples" / "kcompact.properties")])
    orders, audit, other = (config.for_topic(t) for t in ("orders", "audit-log", "clicks"))
    assert orders["cleanup.policy"] == ("compact", "delete") and orders["retention.ms"] == 1_209_600_000
    assert audit["min.compaction.lag.ms"] == 3_600_000 and audit["cleanup.policy"] == ("compact",)
    assert other["min.cleanable.dirty.ratio"] == 0.3 and other["retention.ms"] == 72 * 3_600_000
    assert other["delete.retention.ms"] == 86_400_000


def test_readme_properties_examples_load(tmp_path):
    """Every ``properties`` block of the README loads as it is written."""
    from kcompact.conf import resolve

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = re.findall(r"```properties\n(.*?)```", readme, re.S)
    assert blocks
    for i, block in enumerate(blocks):
        path = tmp_path / f"readme-{i}.properties"
        path.write_text(block)
        resolve.build(files=[str(path)])


# -- item 4: messages a person can act on ---------------------------------------------------------
def test_missing_files_are_named_without_errno(tmp_path, capsys):
    for args in (["dump", str(tmp_path / "00000000000000000000.log")], ["dump", str(tmp_path / "nowhere")],
                 ["plan", str(Path(__file__).parent.parent / "fixtures" / "kafka-written" / "input"),
                  "--config", str(tmp_path / "nowhere.properties")]):
        assert main(args) == 2
        line = one_line(capsys.readouterr().err)
        assert "[Errno" not in line and "No such file" not in line
        assert line.endswith(": no such file or directory"), line


def test_bad_numbers_in_configuration_say_what_is_wanted(tmp_path, capsys):
    dirty(tmp_path / "orders-0")
    assert main(["plan", str(tmp_path), "--topic-config", "orders:segment.bytes=abc"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "invalid literal" not in line and "must be a whole number between 14 and 2147483647" in line
    assert main(["plan", str(tmp_path), "--broker-config", "log.cleaner.min.cleanable.ratio=half"]) == 2
    assert "must be a number between 0 and 1" in one_line(capsys.readouterr().err)


LOCKER = "import fcntl, sys, time; f = open(sys.argv[1] + '/.lock', 'w'); fcntl.lockf(f, fcntl.LOCK_EX); " \
         "print('locked', flush=True); time.sleep(30)  # a long command line: " + "x" * 100


def test_lock_holder_message_reads_as_a_sentence(tmp_path, capsys):
    dirty(tmp_path / "orders-0")
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        assert main(["compact", str(tmp_path), "--now", str(NOW)]) == 5
        line = one_line(capsys.readouterr().err)
    finally:
        proc.kill()
        proc.wait()
    assert line.startswith(f"kcompact: log dir in use: {tmp_path}/.lock is locked by process {proc.pid} "
                           f"(command line: {sys.executable} -c import fcntl")
    assert "\u2026); a Kafka broker or another kcompact job is using it" in line  # cut, then closed
    assert "[Errno" not in line and not line.endswith(f"'{tmp_path}'")



@pytest.mark.parametrize("command", ["compact", "retain", "run", "recover"])
def test_a_report_is_written_when_every_log_dir_is_in_use(tmp_path, capsys, command):
    """Exit 5, nothing done, and the report asked for leads with that outcome: the log dir, who
    holds it, what to do (was: no report at all, so a scheduler's run left no record why)."""
    logs = tmp_path / "logs"
    dirty(logs / "orders-0")
    report = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(logs)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        before = {p.relative_to(logs): p.read_bytes() for p in logs.rglob("*") if p.is_file()}
        clock = [] if command == "recover" else ["--now", str(NOW)]
        assert main([command, str(logs), *clock, "--report", str(report)]) == 5
    finally:
        proc.kill()
        proc.wait()
    assert f"log dir in use: {logs}/.lock is locked by process {proc.pid}" in capsys.readouterr().err
    found = json.loads(report.read_text())["outcome"]
    assert found["exit_code"] == 5, found
    (row,) = found["log_dirs"]
    assert row["log_dir"] == str(logs) and f"is locked by process {proc.pid}" in row["why"], row
    assert row["way_out"].startswith("stop what holds it"), row
    assert "locked by process" in report.with_suffix(".html").read_text()
    assert {p.relative_to(logs): p.read_bytes() for p in logs.rglob("*") if p.is_file()} == before

def test_status_shows_times_not_epoch_milliseconds(tmp_path, capsys):
    dirty(tmp_path / "orders-0")
    dirty(tmp_path / "orders-1")
    (tmp_path / "kcompact-state.orders-0.json").write_text(json.dumps(
        {"state": "uncleanable", "reason": "x.log: byte 9: CRC mismatch", "since_ms": 1_720_001_000_000}))
    (tmp_path / "kcompact-state.orders-1.json").write_text(json.dumps(
        {"state": "in_progress", "owner": "job", "host": "h", "pid": 1, "started_ms": 1_720_001_000_000,
         "heartbeat_ms": 4_102_444_000_000, "lease_ms": 120_000}))
    assert main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "(since 2024-07-03 10:03:20 UTC)" in out
    assert "started 2024-07-03 10:03:20 UTC, lease valid until 2099-12-31 23:48:40 UTC" in out
    assert "1720001000000" not in out and "4102444120000" not in out


def test_s3_errors_name_the_url_and_the_reason(s3_endpoint, capsys):
    import fsspec

    fsspec.filesystem("s3").mkdir("kbucket")
    assert main(["verify", "s3://kbucket/nolog"]) == 2
    assert one_line(capsys.readouterr().err) == (
        "kcompact: s3://kbucket/nolog: no object at or under this path (bucket 'kbucket' exists); " + EXPECTED
        + ": a directory holding meta.properties, checkpoint files or <topic>-<partition> directories of segments")
    assert main(["status", "s3://nobucket/logs"]) == 2
    assert "s3://nobucket/logs: bucket 'nobucket' does not exist; " in one_line(capsys.readouterr().err)

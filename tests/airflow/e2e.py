"""End-to-end check of the Airflow DAG ``kcompact_nightly`` (jobs/airflow_dag.py) on a real Airflow.

``make test-airflow`` runs it with the Python of .venv-airflow, which has Airflow and this project.
In a throwaway AIRFLOW_HOME (SQLite database; a DAG folder holding a copy of jobs/airflow_dag.py
beside packages of its own named ``tools`` and ``jobs``, as a shared DAG folder may, and on the
PYTHONPATH of everything Airflow starts, so that a package of ours by those names would be
shadowed) it checks:
1. parsing: Airflow's DagBag loads the DAG without import errors, and loading it imported
   neither Spark nor this project; the DAG is one task, ``run``, with an execution timeout;
2. the nightly run: ``airflow dags test`` runs ``kcompact run`` on a log dir from ``kcompact gen
   --seed 7``; the task succeeds, its report is where the task said, with the interval's clock
   as ``now`` in every section and one Spark application for the whole night, it cleaned
   partitions and held none back, ``kcompact verify`` passes and the log dir got smaller;
3. the exit-code contract: a log dir with one corrupt partition (exit 4) succeeds with
   ``partial`` in its XCom and a warning in its log; a bad --broker-config (exit 2) fails the
   task at once, without retries; on the failure a real BashOperator raises for each exit code,
   the DAG's retry policy fails 1, 2 and 5 at once and leaves 3 and a kill to the retries;
4. the timeout: with a night of a few seconds (``KCOMPACT_TIMEOUT_HOURS``), the task is killed
   and failed without a retry, and the log dir it leaves recovers and verifies.
Settings reach the DAG the three ways it reads them: Params (``--conf``), Airflow Variables from
the environment, defaults. Prints a line per check and a closing count; exits 1 if any check failed.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the Airflow venv: airflow and kcompact
DAG_ID = "kcompact_nightly"
STEP = "run"
# Runs are told apart by their logical date, which is also the data interval end the DAG turns into --now.
NIGHTLY, PARTIAL, BAD_CONFIG = "2024-07-03T10:03:20+00:00", "2024-07-04T10:03:20+00:00", "2024-07-05T10:03:20+00:00"
TIMEOUT = "2024-07-06T10:03:20+00:00"
NIGHTLY_MS, NIGHTLY_STAMP = 1720001000000, "20240703T100320Z"
PARTIAL_STAMP = "20240704T100320Z"

results: list[bool] = []


def check(name: str, ok: bool, detail: object = "") -> bool:
    results.append(bool(ok))
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok or detail == "" else f": {detail}"), flush=True)
    return bool(ok)


def run(*args: str, env: dict, timeout: float = 600, log: Path | None = None) -> subprocess.CompletedProcess:
    """Run a command; with ``log``, its output goes to that file (``airflow dags test`` says a lot)."""
    if log is None:
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    with open(log, "w") as out:
        try:
            done = subprocess.run(args, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            done = subprocess.CompletedProcess(args, returncode=-1)
    done.stdout = log.read_text(errors="replace")
    return done


def json_out(done: subprocess.CompletedProcess):
    """The JSON an ``airflow ... -o json`` printed: its last line (warnings may come before it)."""
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if done.returncode == 0 and lines else None


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def dags_test(env: dict, logical_date: str, conf: dict, log: Path, timeout: float) -> subprocess.CompletedProcess:
    """``airflow dags test`` of one run."""
    args = [str(BIN / "airflow"), "dags", "test", DAG_ID, logical_date, "--conf", json.dumps(conf)]
    started = time.monotonic()
    done = run(*args, env=env, timeout=timeout, log=log)
    print(f"     airflow dags test {logical_date}: exit {done.returncode} in {time.monotonic() - started:.0f} s",
          flush=True)
    return done


def run_facts(env: dict, db: Path, logical_date: str) -> tuple[dict, dict, dict]:
    """Task states (from the CLI), tries and XComs (from the database) of the run of ``logical_date``."""
    states = json_out(run(str(BIN / "airflow"), "tasks", "states-for-dag-run", DAG_ID, logical_date,
                          "--output", "json", env=env)) or []
    runs = json_out(run(str(BIN / "airflow"), "dags", "list-runs", DAG_ID, "--output", "json", env=env)) or []
    run_ids = [r["run_id"] for r in runs if r["logical_date"] == logical_date]
    tries, xcoms = {}, {}
    if run_ids:
        with sqlite3.connect(db) as conn:
            tries = dict(conn.execute("SELECT task_id, try_number FROM task_instance WHERE dag_id = ? AND run_id = ?",
                                      (DAG_ID, run_ids[0])))
            xcoms = {task: json.loads(value) for task, value in conn.execute(
                "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
                (DAG_ID, run_ids[0]))}
    return {s["task_id"]: s["state"] for s in states}, tries, xcoms


PARSE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
ours = {"pyspark", "py4j", "kcompact"}
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids),
                  "imported": sorted(m for m in sys.modules if m.split(".")[0] in ours)}))
"""

# What the DAG's retry policy decides on the failure a real BashOperator raises for each exit code,
# and on a timeout; the task's timeout.
RETRIES = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk.exceptions import AirflowTaskTimeout
dag = DagBag(dag_folder=sys.argv[1]).dags["kcompact_nightly"]
task = dag.get_task("run")
decisions = {}
for code in (1, 2, 3, 5, 137):
    try:
        BashOperator(task_id=f"exit_{code}", bash_command=f"exit {code}", skip_on_exit_code=None).execute({})
    except Exception as exc:
        decisions[code] = task.retry_policy.evaluate(exc, try_number=1, max_tries=3).action.value
decisions["timeout"] = task.retry_policy.evaluate(AirflowTaskTimeout(), try_number=1, max_tries=3).action.value
print(json.dumps({"tasks": sorted(dag.task_ids), "timeout_s": task.execution_timeout.total_seconds(),
                  "decisions": decisions}))
"""


def dag_folder(tmp: Path) -> Path:
    """The example DAG beside the DAG folder's own ``tools`` and ``jobs`` packages, which refuse to
    be imported by anyone but their own DAGs."""
    folder = tmp / "dags"
    for own in ("tools", "jobs"):
        (folder / own).mkdir(parents=True)
        (folder / own / "__init__.py").write_text(
            f"raise ImportError('the DAG folder\\'s own {own} package was imported instead of kcompact\\'s')\n")
    shutil.copy(ROOT / "jobs" / "airflow_dag.py", folder / "airflow_dag.py")
    return folder


def check_parsing(env: dict) -> None:
    folder = env["AIRFLOW__CORE__DAGS_FOLDER"]
    done = run(str(BIN / "python"), "-c", PARSE, folder, env=env)
    parsed = json_out(done)
    if not check("DagBag parses the DAG folder", parsed is not None, tail(done.stdout + done.stderr)):
        return
    check("no import errors", parsed["errors"] == {}, parsed["errors"])
    check(f"{DAG_ID} is the DAG of the DAG folder", parsed["dags"] == [DAG_ID], parsed["dags"])
    check("parsing imported neither Spark nor this project", parsed["imported"] == [], parsed["imported"])
    listed = json_out(run(str(BIN / "airflow"), "dags", "list-import-errors", "--local", "--output", "json", env=env))
    check("airflow dags list-import-errors --local is empty", listed == [], listed)
    found = json_out(run(str(BIN / "python"), "-c", RETRIES, folder, env=env)) or {}
    check(
        "one task, run, with a 6 h execution timeout",
        (found.get("tasks"), found.get("timeout_s")) == (["run"], 6 * 3600),
        found,
    )
    check("retry policy: exit 1, 2 and 5 and a timeout fail at once, 3 and a kill (137) are retried",
          found.get("decisions") == {"1": "fail", "2": "fail", "3": "default", "5": "fail", "137": "default",
                                     "timeout": "fail"}, found.get("decisions"))


def check_nightly(env: dict, db: Path, tmp: Path) -> None:
    logs, reports = tmp / "logs", tmp / "reports"
    done = run(str(BIN / "kcompact"), "gen", "--out", str(logs), "--seed", "7", env=env)
    if not check("kcompact gen --seed 7", done.returncode == 0, tail(done.stdout + done.stderr)):
        return
    before = size(logs)
    # log dirs from a Variable (environment), the report dir from a Param
    env = {**env, "AIRFLOW_VAR_KCOMPACT_LOG_DIRS": json.dumps([str(logs)])}
    done = dags_test(env, NIGHTLY, {"report_dir": str(reports)}, tmp / "nightly.log", timeout=1800)
    check("nightly run: airflow dags test exits 0", done.returncode == 0, tail(done.stdout))
    states, tries, xcoms = run_facts(env, db, NIGHTLY)
    check("nightly run: the task succeeded at the first try",
          (states, tries) == ({STEP: "success"}, {STEP: 1}), (states, tries))
    report = reports / NIGHTLY_STAMP / f"{STEP}.json"
    check("run: XCom says done, exit 0, and names its report",
          xcoms.get(STEP) == {"step": STEP, "exit_code": 0, "status": "done", "report": str(report)}, xcoms.get(STEP))
    check("run: the task log names the report", f"kcompact {STEP}: exit code 0, report {report}" in done.stdout)
    if not check("run: the report and its page are there", report.is_file() and report.with_suffix(".html").is_file(),
                 report):
        return
    doc = json.loads(report.read_text())
    nows = (doc["now"], doc["retention"]["now"], doc["compaction"]["now"])
    check(f"run: every step ran at the interval end ({NIGHTLY_MS} ms)", nows == (NIGHTLY_MS,) * 3, nows)
    check("run: one kcompact run, one Spark application for the whole night",
          doc["run"]["command"] == STEP and doc["run"]["spark_app_id"] and doc["run"]["log_dirs"] == [str(logs)],
          doc["run"])
    totals = doc["compaction"]["totals"]
    check("run: partitions cleaned, none failed, none held back",
          totals["cleaned"] > 0 and totals["failed"] == 0 and doc["compaction"]["blocked"] == [], totals)
    done = run(str(BIN / "kcompact"), "verify", str(logs), env=env)
    check("kcompact verify passes on the log dir", done.returncode == 0, tail(done.stdout + done.stderr))
    after = size(logs)
    check(f"the log dir got smaller ({before} -> {after} bytes)", after < before)


def check_partial(env: dict, db: Path, tmp: Path) -> None:
    """Exit 4: one partition's segment has a flipped byte; the night cleans the others."""
    logs, reports = tmp / "corrupt", tmp / "reports"
    done = run(str(BIN / "kcompact"), "gen", "--out", str(logs), "--seed", "7", env=env)
    if not check("kcompact gen --seed 7 (to corrupt)", done.returncode == 0, tail(done.stdout + done.stderr)):
        return
    segment = sorted((logs / "orders-0").glob("*.log"))[0]  # the oldest segment: dirty, never active
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(data)
    done = dags_test(env, PARTIAL, {"log_dirs": [str(logs)], "report_dir": str(reports)}, tmp / "partial.log",
                     timeout=1200)
    states, _tries, xcoms = run_facts(env, db, PARTIAL)
    report = reports / PARTIAL_STAMP / f"{STEP}.json"
    check("exit 4: the task succeeds", done.returncode == 0 and states.get(STEP) == "success", states)
    check("exit 4: XCom says partial and names the report",
          xcoms.get(STEP) == {"step": STEP, "exit_code": 4, "status": "partial", "report": str(report)},
          xcoms.get(STEP))
    check("exit 4: the task log has the warning", f"kcompact {STEP}: partial success (exit 4)" in done.stdout)
    failed = [(p["topic"], p["partition"]) for p in json.loads(report.read_text())["compaction"]["partitions"]
              if p["error"]] if report.is_file() else None
    check("exit 4: the report has orders-0 and only it failed", failed == [("orders", 0)], failed)


def check_bad_config(env: dict, db: Path, tmp: Path) -> None:
    """Exit 2: a verdict, so no retry (which would wait 5 minutes: the timeout catches it)."""
    conf = {"log_dirs": [str(tmp / "logs")], "report_dir": str(tmp / "reports"),
            "extra_args": ["--broker-config", "no.such.setting=1"]}
    done = dags_test(env, BAD_CONFIG, conf, tmp / "bad-config.log", timeout=240)
    check("exit 2: airflow dags test ends without waiting for a retry", done.returncode != -1, tail(done.stdout))
    states, tries, _ = run_facts(env, db, BAD_CONFIG)
    check("exit 2: the task failed at its first try", (states.get(STEP), tries.get(STEP)) == ("failed", 1),
          (states, tries))
    check("exit 2: the task log names kcompact's exit code", f"kcompact {STEP}: exit code 2" in done.stdout)


def check_timeout(env: dict, db: Path, tmp: Path) -> None:
    """A night longer than its timeout (here 5 s: Spark alone takes longer to start) is killed and
    failed at its first try; the log dir is as a crash leaves it, and recovers."""
    logs = tmp / "slow"
    done = run(str(BIN / "kcompact"), "gen", "--out", str(logs), "--seed", "7", env=env)
    if not check("kcompact gen --seed 7 (to time out)", done.returncode == 0, tail(done.stdout + done.stderr)):
        return
    env = {**env, "KCOMPACT_TIMEOUT_HOURS": str(5 / 3600)}
    done = dags_test(env, TIMEOUT, {"log_dirs": [str(logs)], "report_dir": str(tmp / "reports")}, tmp / "timeout.log",
                     timeout=600)
    check("timeout: airflow dags test ends without waiting for a retry", done.returncode != -1, tail(done.stdout))
    states, tries, _ = run_facts(env, db, TIMEOUT)
    check("timeout: the task failed at its first try", (states.get(STEP), tries.get(STEP)) == ("failed", 1),
          (states, tries))
    check("timeout: the task timed out, and the retry policy failed it",
          "AirflowTaskTimeout" in done.stdout and "the night took longer than" in done.stdout, tail(done.stdout))
    recovered = run(str(BIN / "kcompact"), "recover", str(logs), env=env)
    verified = run(str(BIN / "kcompact"), "verify", str(logs), env=env)
    check("timeout: the log dir recovers and verifies", (recovered.returncode, verified.returncode) == (0, 0),
          tail(recovered.stdout + recovered.stderr + verified.stdout))


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="kcompact-airflow-"))
    home = tmp / "airflow-home"
    dags = dag_folder(tmp)
    env = {**os.environ,
           "AIRFLOW_HOME": str(home),
           "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "PYTHONPATH": str(dags),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
           "AIRFLOW_VAR_KCOMPACT_COMMAND": f"{BIN / 'kcompact'} {{step}}",  # the command from a Variable
           "PYSPARK_PYTHON": str(BIN / "python"), "PYSPARK_DRIVER_PYTHON": str(BIN / "python")}
    done = run(str(BIN / "airflow"), "db", "migrate", env=env)
    if check("airflow db migrate", done.returncode == 0, tail(done.stdout + done.stderr)):
        check_parsing(env)
        check_nightly(env, home / "airflow.db", tmp)
        check_partial(env, home / "airflow.db", tmp)
        check_bad_config(env, home / "airflow.db", tmp)
        check_timeout(env, home / "airflow.db", tmp)
    failed = results.count(False)
    if failed:
        print(f"     logs, reports and log dirs kept in {tmp}")
    else:
        shutil.rmtree(tmp)
    print(f"airflow: {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""End-to-end check of the Airflow DAG ``kcompact_nightly`` (jobs/airflow_dag.py) on a real Airflow.

``make test-airflow`` runs it with the Python of .venv-airflow, which has Airflow and this project.
In a throwaway AIRFLOW_HOME (SQLite database, jobs/ as the DAG folder) it checks:
1. parsing: Airflow's DagBag loads the DAG without import errors, and loading it imported
   neither Spark nor this project;
2. the nightly run: ``airflow dags test`` runs recover -> retain -> plan -> compact on a log dir
   from ``kcompact gen --seed 7``; every task succeeds, every report is where the task said with
   the interval's clock as ``now``, ``kcompact verify`` passes and the log dir got smaller;
3. the exit-code contract: compact on a log dir with one corrupt partition (exit 4) succeeds with
   ``partial`` in its XCom and a warning in its log; a bad --broker-config (exit 2) fails retain
   at once, without retries, and the tasks after it do not run; on the failure a real
   BashOperator raises for each exit code, the DAG's retry policy fails 1, 2 and 5 at once and
   leaves 3 and a kill to the retries.
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
STEPS = ("recover", "retain", "plan", "compact")
# Runs are told apart by their logical date, which is also the data interval end the DAG turns into --now.
NIGHTLY, PARTIAL, BAD_CONFIG = "2024-07-03T10:03:20+00:00", "2024-07-04T10:03:20+00:00", "2024-07-05T10:03:20+00:00"
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


def dags_test(env: dict, logical_date: str, conf: dict, log: Path, timeout: float,
              only: str | None = None) -> subprocess.CompletedProcess:
    """``airflow dags test`` of one run; with ``only``, the other tasks are marked successful unrun."""
    args = [str(BIN / "airflow"), "dags", "test", DAG_ID, logical_date, "--conf", json.dumps(conf)]
    if only:
        args += ["--mark-success-pattern", f"^(?!(?:{only})$)"]
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
ours = {"pyspark", "py4j", "compaction", "conf", "jobs", "planner", "readers", "storage", "writers"}
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids),
                  "imported": sorted(m for m in sys.modules if m.split(".")[0] in ours)}))
"""

# What the DAG's retry policy decides on the failure a real BashOperator raises for each exit code.
RETRIES = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.providers.standard.operators.bash import BashOperator
policy = DagBag(dag_folder=sys.argv[1]).dags["kcompact_nightly"].get_task("compact").retry_policy
decisions = {}
for code in (1, 2, 3, 5, 137):
    try:
        BashOperator(task_id=f"exit_{code}", bash_command=f"exit {code}", skip_on_exit_code=None).execute({})
    except Exception as exc:
        decisions[code] = policy.evaluate(exc, try_number=1, max_tries=3).action.value
print(json.dumps(decisions))
"""


def check_parsing(env: dict) -> None:
    done = run(str(BIN / "python"), "-c", PARSE, str(ROOT / "jobs"), env=env)
    parsed = json_out(done)
    if not check("DagBag parses jobs/", parsed is not None, tail(done.stdout + done.stderr)):
        return
    check("no import errors", parsed["errors"] == {}, parsed["errors"])
    check(f"{DAG_ID} is the DAG of jobs/", parsed["dags"] == [DAG_ID], parsed["dags"])
    check("parsing imported neither Spark nor this project", parsed["imported"] == [], parsed["imported"])
    listed = json_out(run(str(BIN / "airflow"), "dags", "list-import-errors", "--local", "--output", "json", env=env))
    check("airflow dags list-import-errors --local is empty", listed == [], listed)
    decisions = json_out(run(str(BIN / "python"), "-c", RETRIES, str(ROOT / "jobs"), env=env))
    check("retry policy: exit 1, 2 and 5 fail at once, 3 and a kill (137) are retried",
          decisions == {"1": "fail", "2": "fail", "3": "default", "5": "fail", "137": "default"}, decisions)


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
    check("nightly run: every task succeeded at the first try",
          states == dict.fromkeys(STEPS, "success") and tries == dict.fromkeys(STEPS, 1), (states, tries))
    for step in STEPS:
        report = reports / NIGHTLY_STAMP / f"{step}.json"
        check(f"{step}: XCom says done, exit 0, and names its report",
              xcoms.get(step) == {"step": step, "exit_code": 0, "status": "done", "report": str(report)},
              xcoms.get(step))
        check(f"{step}: the task log names the report",
              f"kcompact {step}: exit code 0, report {report}" in done.stdout)
        check(f"{step}: the report is there", report.is_file(), report)
    for step in ("retain", "compact"):
        report = reports / NIGHTLY_STAMP / f"{step}.json"
        now = json.loads(report.read_text()).get("now") if report.is_file() else None
        check(f"{step}: ran at the interval end ({NIGHTLY_MS} ms)", now == NIGHTLY_MS, now)
    plan = reports / NIGHTLY_STAMP / "plan.json"
    selected = sum(1 for row in json.loads(plan.read_text()) if row["selected"]) if plan.is_file() else 0
    compacted = reports / NIGHTLY_STAMP / "compact.json"
    totals = json.loads(compacted.read_text())["totals"] if compacted.is_file() else {}
    check("compact cleaned every partition the plan selected, none failed",
          selected > 0 and totals.get("cleaned") == selected and totals.get("failed") == 0, (selected, totals))
    done = run(str(BIN / "kcompact"), "verify", str(logs), env=env)
    check("kcompact verify passes on the log dir", done.returncode == 0, tail(done.stdout + done.stderr))
    after = size(logs)
    check(f"the log dir got smaller ({before} -> {after} bytes)", after < before)


def check_partial(env: dict, db: Path, tmp: Path) -> None:
    """Exit 4: one partition's segment has a flipped byte; compaction cleans the others."""
    logs, reports = tmp / "corrupt", tmp / "reports"
    done = run(str(BIN / "kcompact"), "gen", "--out", str(logs), "--seed", "7", env=env)
    if not check("kcompact gen --seed 7 (to corrupt)", done.returncode == 0, tail(done.stdout + done.stderr)):
        return
    segment = sorted((logs / "orders-0").glob("*.log"))[0]  # the oldest segment: dirty, never active
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(data)
    done = dags_test(env, PARTIAL, {"log_dirs": [str(logs)], "report_dir": str(reports)}, tmp / "partial.log",
                     timeout=1200, only="compact")
    states, tries, xcoms = run_facts(env, db, PARTIAL)
    report = reports / PARTIAL_STAMP / "compact.json"
    check("exit 4: compact succeeds", done.returncode == 0 and states.get("compact") == "success", states)
    check("exit 4: XCom says partial and names the report",
          xcoms.get("compact") == {"step": "compact", "exit_code": 4, "status": "partial", "report": str(report)},
          xcoms.get("compact"))
    check("exit 4: the task log has the warning", "kcompact compact: partial success (exit 4)" in done.stdout)
    failed = [(p["topic"], p["partition"]) for p in json.loads(report.read_text())["partitions"] if p["error"]] \
        if report.is_file() else None
    check("exit 4: the report has orders-0 and only it failed", failed == [("orders", 0)], failed)


def check_bad_config(env: dict, db: Path, tmp: Path) -> None:
    """Exit 2: a verdict, so no retry (which would wait 5 minutes: the timeout catches it)."""
    conf = {"log_dirs": [str(tmp / "logs")], "report_dir": str(tmp / "reports"),
            "extra_args": ["--broker-config", "no.such.setting=1"]}
    done = dags_test(env, BAD_CONFIG, conf, tmp / "bad-config.log", timeout=240, only="retain|plan|compact")
    check("exit 2: airflow dags test ends without waiting for a retry", done.returncode != -1, tail(done.stdout))
    states, tries, _ = run_facts(env, db, BAD_CONFIG)
    check("exit 2: retain failed at its first try, the tasks after it did not run",
          (states.get("retain"), tries.get("retain"), states.get("plan"), states.get("compact"))
          == ("failed", 1, "upstream_failed", "upstream_failed"), (states, tries))
    check("exit 2: the task log names kcompact's exit code", "kcompact retain: exit code 2" in done.stdout)


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="kcompact-airflow-"))
    home = tmp / "airflow-home"
    env = {**os.environ,
           "AIRFLOW_HOME": str(home),
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "jobs"),
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
    failed = results.count(False)
    if failed:
        print(f"     logs, reports and log dirs kept in {tmp}")
    else:
        shutil.rmtree(tmp)
    print(f"airflow: {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The nightly run as an Airflow DAG, ``kcompact_nightly``: one task, ``kcompact run``.

``kcompact run`` is the whole night in one process, one Spark session and one clock, holding every
log dir's ``.lock`` from start to end: recovery of what an interrupted run or a crashed broker left,
retention, a fresh plan on the log as retention left it, compaction of what the plan selects; one
report, ``<report_dir>/<interval end, UTC>/run.json`` and ``run.html`` beside it. (Separate tasks
would start a Spark session each and let go of the locks between steps, so a broker or another job
could slip in between retention and compaction.) The task is a BashOperator that runs our command
line, so the DAG file imports neither Spark nor this project: Airflow parses it often, and the
Airflow workers only need the ``kcompact`` command (or spark-submit) on hand.

Settings, per run first: the run's Params (trigger form or ``--conf``), else the Airflow Variable
``kcompact_<name>`` (also read from the environment as ``AIRFLOW_VAR_KCOMPACT_<NAME>``), else the
default:

- ``log_dirs``: JSON list of log dirs (local or ``s3://``); required.
- ``report_dir``: where each run writes its report; default ``$AIRFLOW_HOME/kcompact-reports``.
- ``extra_args``: JSON list of more arguments for ``kcompact run`` (``--config FILE``,
  ``--topic-config ...``, ``--broker-config ...``, ``--max-partitions N``, ``--driver-memory``...);
  default none.
- ``command`` (Variable only, because it is shell text and a run's Params come from whoever
  triggers it): the command line, ``{step}`` standing for ``run``; default ``kcompact {step}``;
  with ``make dist``'s files, e.g. ``spark-submit --master yarn --py-files
  /opt/kcompact/kcompact-py.zip /opt/kcompact/{step}.py``.

``--now`` is the run's data interval end in ms (its ``run_after`` when triggered without a logical
date), so a rerun of one interval decides as the first try did. A night may take at most
``KCOMPACT_TIMEOUT_HOURS`` hours (environment of the DAG processor, default 6): past it the task is
killed and failed, not retried, so a hung night cannot hold back the next ones (one run at a time).
A kill at any instant leaves the log dirs as a crash does, and the next run recovers them first.

Exit codes to task states: 0 success; 4 (partial: some partitions failed or are held back by bad
input or an uncleanable state, or a log dir was in use or held no partition; the rest done)
success, with a warning in the log and ``partial`` in the XCom, every night until someone fixes
what the report lists; 1 (bad input), 2 (usage or configuration) and 5 (everything attempted
failed) fail the task at once, since a retry would repeat the verdict; 3 (internal error) and a
kill by a signal fail it and are retried (twice, 5 minutes apart): each try starts from the log
dirs as it finds them (recovery first, a plan made anew at the same ``--now``, the killed try's
leases lapsed after 120 s). The task log names the report; the XCom (return value) is
``{"step", "exit_code", "status", "report"}``.
"""

from __future__ import annotations

import calendar
import logging
import os
import re
import shlex
from datetime import UTC, datetime, timedelta

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Param, RetryDecision, RetryPolicy, Variable
from airflow.sdk.exceptions import AirflowFailException, AirflowTaskTimeout

log = logging.getLogger(__name__)

STEP = "run"
EXIT_OK, EXIT_PARTIAL = 0, 4
FINAL = {1: "bad input", 2: "bad usage or configuration", 5: "everything attempted failed"}
TIMEOUT = timedelta(hours=float(os.environ.get("KCOMPACT_TIMEOUT_HOURS", "6")))


def _setting(params, name: str, default):
    """The run's Param, else the Variable ``kcompact_<name>`` (JSON for lists), else ``default``."""
    value = params.get(name)
    if value is None:
        value = Variable.get(f"kcompact_{name}", default=default, deserialize_json=isinstance(default, list))
    if isinstance(default, list) and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise AirflowFailException(f"{name} must be a list of strings, not {value!r}")
    return value


def step_script(step: str, params, dag_run) -> str:
    """The bash script of the night: run it, name its report, let 0 and 4 succeed, and end with
    the line ``STEP EXIT_CODE REPORT`` that ``step_result`` turns into the task's XCom."""
    when = dag_run.data_interval_end or dag_run.run_after  # a run triggered without a logical date has no interval
    log_dirs = _setting(params, "log_dirs", [])
    if not log_dirs:
        raise AirflowFailException("no log dirs: set the log_dirs Param or the kcompact_log_dirs Variable")
    home = os.path.expanduser(os.environ.get("AIRFLOW_HOME", "~/airflow"))
    report_dir = _setting(params, "report_dir", os.path.join(home, "kcompact-reports"))
    run_dir = f"{report_dir.rstrip('/')}/{when.astimezone(UTC):%Y%m%dT%H%M%SZ}"
    report = shlex.quote(f"{run_dir}/{step}.json")
    now_ms = calendar.timegm(when.utctimetuple()) * 1000 + when.microsecond // 1000
    args = [*log_dirs, "--now", str(now_ms), *_setting(params, "extra_args", [])]
    command = Variable.get("kcompact_command", default="kcompact {step}").replace("{step}", step)
    return "\n".join([
        *([] if "://" in run_dir else [f"mkdir -p -- {shlex.quote(run_dir)}"]),
        f"{command} {shlex.join(args)} --report {report}",
        "rc=$?",
        f'echo "kcompact {step}: exit code $rc, report" {report}',
        f"case $rc in {EXIT_OK}|{EXIT_PARTIAL}) ;; *) exit $rc ;; esac",
        f"echo {step} $rc {report}",
    ])


def step_result(last_line: str) -> dict:
    """The XCom of a night that succeeded, from its last line; a partial success is logged as a warning."""
    step, code, report = last_line.split(" ", 2)
    status = "partial" if int(code) == EXIT_PARTIAL else "done"
    if status == "partial":
        log.warning("kcompact %s: partial success (exit %s): some partitions failed or are held back until fixed, "
                    "see %s", step, code, report)
    return {"step": step, "exit_code": int(code), "status": status, "report": report}


class ExitCodePolicy(RetryPolicy):
    """Fail at once on kcompact's verdicts (1, 2, 5), which a retry would repeat, and on a timeout,
    which would only hold back the next nights; retry the rest (3, a kill by signal, a failure before
    the command ran) as the task's ``retries`` allow."""

    def evaluate(self, exception, try_number, max_tries, context=None) -> RetryDecision:
        if isinstance(exception, AirflowTaskTimeout):
            return RetryDecision.fail(f"the night took longer than {TIMEOUT}; the next run starts afresh")
        found = re.search(r"exit code (\d+)", str(exception))
        code = int(found.group(1)) if found else None
        if code in FINAL:
            return RetryDecision.fail(f"kcompact exit code {code}: {FINAL[code]}; a retry would give the same answer")
        return RetryDecision.default()


with DAG(
    dag_id="kcompact_nightly",
    description="Kafka log dirs: recover, apply retention, plan and compact, in one kcompact run",
    doc_md=__doc__,
    schedule="@daily",
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,  # each run works on the log dirs as they are now; missed nights add nothing
    max_active_runs=1,  # two runs on the same log dirs would refuse each other's
    params={
        "log_dirs": Param(
            None,
            type=["null", "array"],
            items={"type": "string"},
            description="log dirs (local or s3://); default: the kcompact_log_dirs Variable",
        ),
        "report_dir": Param(
            None,
            type=["null", "string"],
            description="the report goes to REPORT_DIR/<interval end>/run.json (and run.html); "
            "default: the kcompact_report_dir Variable, else $AIRFLOW_HOME/kcompact-reports",
        ),
        "extra_args": Param(
            None,
            type=["null", "array"],
            items={"type": "string"},
            description="more arguments for kcompact run (--config, --topic-config, --broker-config, "
            "--max-partitions...); default: the kcompact_extra_args Variable",
        ),
    },
    user_defined_macros={"step_script": step_script},
    default_args={
        "retries": 2,
        "retry_delay": timedelta(minutes=5),
        "retry_policy": ExitCodePolicy(),
        "execution_timeout": TIMEOUT,
    },
    tags=["kcompact", "kafka"],
) as dag:
    BashOperator(
        task_id=STEP,
        bash_command=f"{{{{ step_script('{STEP}', params, dag_run) }}}}",
        skip_on_exit_code=None,  # no exit code of ours means "skipped"
        output_processor=step_result,
    )

"""The nightly run as an Airflow DAG, ``kcompact_nightly``: recover -> retain -> plan -> compact.

Each task is a BashOperator that runs our command line (``kcompact STEP LOGDIR... --now MS
--report FILE``), so the DAG file imports neither Spark nor this project: Airflow parses it
often, and the Airflow workers only need the ``kcompact`` command (or spark-submit) on hand.

Settings, per run first: the run's Params (trigger form or ``--conf``), else the Airflow
Variable ``kcompact_<name>`` (also read from the environment as ``AIRFLOW_VAR_KCOMPACT_<NAME>``),
else the default:

- ``log_dirs``: JSON list of log dirs (local or ``s3://``); required.
- ``report_dir``: where each run writes ``<report_dir>/<interval end, UTC>/<step>.json``
  (``plan.json`` is the plan); default ``$AIRFLOW_HOME/kcompact-reports``.
- ``extra_args``: JSON list of arguments for retain, plan and compact (``--config FILE``,
  ``--topic-config ...``, ``--broker-config ...``); default none.
- ``command`` (Variable only, because it is shell text and a run's Params come from whoever
  triggers it): the command line of one step, ``{step}`` standing for the step's name; default
  ``kcompact {step}``; with ``make dist``'s files, e.g. ``spark-submit --master yarn --py-files
  /opt/kcompact/kcompact-py.zip /opt/kcompact/{step}.py``.

``--now`` is the run's data interval end in ms (its ``run_after`` when triggered without a
logical date), so a rerun of one interval decides as the first try did. Every step may be
retried (twice, 5 minutes apart), because each starts from the log dirs as it finds them:
recover finishes or rolls back interrupted swaps and has nothing left to do the second time;
retain plans anew at the same ``--now``, so it deletes only what is still due; plan only reads
the log dirs and writes one file; compact plans anew too, so partitions an earlier try cleaned
are no longer dirty, a swap the killed try left is recovered before its partition is touched,
and the killed try's leases (120 s) have lapsed by the retry. One run at a time: two would only
refuse each other's log dirs.

Exit codes to task states: 0 success; 4 (partial: some partitions failed or a log dir was in
use, the rest done) success, with a warning in the log and ``partial`` in the XCom; 1 (bad
input), 2 (usage or configuration) and 5 (everything attempted failed) fail the task at once and
stop the tasks after it, since a retry would repeat the verdict, or skip the partitions it
marked uncleanable and report success; 3 (internal error) and a kill by signal fail it and are
retried. The task log names the JSON report; the XCom (return value) is ``{"step",
"exit_code", "status", "report"}``.
"""

from __future__ import annotations

import calendar
import logging
import os
import re
import shlex
from datetime import datetime, timedelta, timezone

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Param, RetryDecision, RetryPolicy, Variable, chain
from airflow.sdk.exceptions import AirflowFailException

log = logging.getLogger(__name__)

STEPS = ("recover", "retain", "plan", "compact")
EXIT_OK, EXIT_PARTIAL = 0, 4
FINAL = {1: "bad input", 2: "bad usage or configuration", 5: "everything attempted failed"}


def _setting(params, name: str, default):
    """The run's Param, else the Variable ``kcompact_<name>`` (JSON for lists), else ``default``."""
    value = params.get(name)
    if value is None:
        value = Variable.get(f"kcompact_{name}", default=default, deserialize_json=isinstance(default, list))
    if isinstance(default, list) and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise AirflowFailException(f"{name} must be a list of strings, not {value!r}")
    return value


def step_script(step: str, params, dag_run) -> str:
    """The bash script of one step: run it, name its report, let 0 and 4 succeed, and end with
    the line ``STEP EXIT_CODE REPORT`` that ``step_result`` turns into the task's XCom."""
    when = dag_run.data_interval_end or dag_run.run_after  # a run triggered without a logical date has no interval
    log_dirs = _setting(params, "log_dirs", [])
    if not log_dirs:
        raise AirflowFailException("no log dirs: set the log_dirs Param or the kcompact_log_dirs Variable")
    home = os.path.expanduser(os.environ.get("AIRFLOW_HOME", "~/airflow"))
    report_dir = _setting(params, "report_dir", os.path.join(home, "kcompact-reports"))
    run_dir = f"{report_dir.rstrip('/')}/{when.astimezone(timezone.utc):%Y%m%dT%H%M%SZ}"
    report = shlex.quote(f"{run_dir}/{step}.json")
    args = [*log_dirs]
    if step != "recover":  # recover needs no clock and takes no configuration
        now_ms = calendar.timegm(when.utctimetuple()) * 1000 + when.microsecond // 1000
        args += ["--now", str(now_ms), *_setting(params, "extra_args", [])]
    command = Variable.get("kcompact_command", default="kcompact {step}").replace("{step}", step)
    return "\n".join([
        *([] if "://" in run_dir else [f"mkdir -p -- {shlex.quote(run_dir)}"]),
        f"{command} {shlex.join(args)} {'--output' if step == 'plan' else '--report'} {report}",
        "rc=$?",
        f'echo "kcompact {step}: exit code $rc, report" {report}',
        f"case $rc in {EXIT_OK}|{EXIT_PARTIAL}) ;; *) exit $rc ;; esac",
        f"echo {step} $rc {report}",
    ])


def step_result(last_line: str) -> dict:
    """The XCom of a step that succeeded, from its last line; a partial success is logged as a warning."""
    step, code, report = last_line.split(" ", 2)
    status = "partial" if int(code) == EXIT_PARTIAL else "done"
    if status == "partial":
        log.warning("kcompact %s: partial success (exit %s): some partitions failed or a log dir was in use, see %s", step, code, report)
    return {"step": step, "exit_code": int(code), "status": status, "report": report}


class ExitCodePolicy(RetryPolicy):
    """Fail at once on kcompact's verdicts (1, 2, 5), which a retry would repeat; retry the rest
    (3, a kill by signal, a failure before the command ran) as the task's ``retries`` allow."""

    def evaluate(self, exception, try_number, max_tries, context=None) -> RetryDecision:
        found = re.search(r"exit code (\d+)", str(exception))
        code = int(found.group(1)) if found else None
        if code in FINAL:
            return RetryDecision.fail(f"kcompact exit code {code}: {FINAL[code]}; a retry would give the same answer")
        return RetryDecision.default()


with DAG(
    dag_id="kcompact_nightly",
    description="Kafka log dirs: recover interrupted swaps, apply retention, plan, compact",
    doc_md=__doc__,
    schedule="@daily",
    start_date=datetime(2024, 1, 1, tzinfo=timezone.utc),
    catchup=False,  # each run works on the log dirs as they are now; missed nights add nothing
    max_active_runs=1,  # two runs on the same log dirs would refuse each other's
    params={
        "log_dirs": Param(None, type=["null", "array"], items={"type": "string"},
                          description="log dirs (local or s3://); default: the kcompact_log_dirs Variable"),
        "report_dir": Param(None, type=["null", "string"],
                            description="reports go to REPORT_DIR/<interval end>/<step>.json; "
                                        "default: the kcompact_report_dir Variable, else $AIRFLOW_HOME/kcompact-reports"),
        "extra_args": Param(None, type=["null", "array"], items={"type": "string"},
                            description="arguments for retain, plan and compact (--config, --topic-config, "
                                        "--broker-config); default: the kcompact_extra_args Variable"),
    },
    user_defined_macros={"step_script": step_script},
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5), "retry_policy": ExitCodePolicy()},
    tags=["kcompact", "kafka"],
) as dag:
    chain(*(
        BashOperator(
            task_id=step,
            bash_command=f"{{{{ step_script('{step}', params, dag_run) }}}}",
            skip_on_exit_code=None,  # no exit code of ours means "skipped"
            output_processor=step_result,
        )
        for step in STEPS
    ))

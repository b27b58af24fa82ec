"""The README's Python API example as a plain script run by the venv's Python, as a reader
would run it: no PYSPARK_PYTHON, no activated venv (``python3`` on the PATH is the system's,
which has no kcompact), a local session the script makes itself (issue 33, item 5).

Was: some 60 lines of traceback ending ``ModuleNotFoundError: No module named 'planner'``
(Spark's Python workers started ``python3``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kcompact.tools import generator

pytestmark = pytest.mark.slow  # a Spark session of its own: more than 20 s

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_720_001_000_000
SCRIPT = """
import json, sys
from pyspark.sql import SparkSession
import kcompact

spark = SparkSession.builder.master("local[2]").getOrCreate()
plan = kcompact.plan(spark, [sys.argv[1]], now=int(sys.argv[2]))
kcompact.register_data_source(spark)
rows = spark.read.format("kafka-log").option("topics", "orders").load(sys.argv[1]).count()
ends = {f"{t}-{p}": e for t, p, e in zip(*(plan.table.column(c).to_pylist()
                                             for c in ("topic", "partition", "log_end_offset")))}
print("RESULT " + json.dumps({"ends": ends, "records": rows}))
spark.stop()
"""


def test_the_api_example_runs_from_a_plain_script(tmp_path):
    logs = tmp_path / "logs"
    result = generator.generate(str(logs), generator.load_spec(None), seed=7)
    script = tmp_path / "example.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV", "KCOMPACT_"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if Path(p).resolve() != Path(sys.executable).parent.resolve())
    done = subprocess.run([sys.executable, str(script), str(logs), str(NOW)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    found = json.loads(line[len("RESULT "):])
    truth = {f"{t}-{p}": part.log_end_offset for (t, p), part in result.partitions.items()}
    assert found["ends"].keys() == truth.keys(), found
    compacted = {name: end for name, end in found["ends"].items() if end is not None}  # delete-only: not read
    assert compacted and compacted == {name: truth[name] for name in compacted}, found
    assert found["records"] > 0, found

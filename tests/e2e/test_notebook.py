"""examples/plan_and_compact.ipynb run from top to bottom as a reader would run it.

nbclient executes it in a kernel of this project's interpreter (an ipykernel spec installed into
a temporary JUPYTER_PATH, pointing at the Python running the tests: the venv's); any cell error
fails the test. Then a few outputs are checked against independent truth: the partitions the
generator reports, the plan's picture decoding as a PNG of the plot's size, a dry run that
removes records, and the records read back, compared with what kafka-python reads from the same
segment files.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import re
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from kafka.record.memory_records import MemoryRecords
from matplotlib import image
from nbclient import NotebookClient

from kcompact.planner.plot import DPI, FIGSIZE

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "plan_and_compact.ipynb"
KERNEL = "kcompact-venv"


pytestmark = pytest.mark.slow  # every test here waits for the module fixture below: more than 20 s


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    from ipykernel.kernelspec import install

    root = tmp_path_factory.mktemp("notebook")
    prefix = root / "jupyter"
    (root / "tmp").mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the sample log dir, kept for the tests before the last cell removes it
    sample = root / "sample"
    nb.cells.insert(len(nb.cells) - 1, nbformat.v4.new_code_cell(
        f"shutil.copytree(log_dir, {str(sample)!r}, symlinks=True)", id="keep-sample"))
    with pytest.MonkeyPatch.context() as env:  # the kernel inherits these; its temp dirs land under root
        env.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
        env.setenv("JUPYTER_RUNTIME_DIR", str(root / "runtime"))
        env.setenv("IPYTHONDIR", str(root / "ipython"))
        env.setenv("TMPDIR", str(root / "tmp"))
        install(kernel_name=KERNEL, display_name="kcompact (.venv)", prefix=str(prefix))
        spec = json.loads((prefix / "share" / "jupyter" / "kernels" / KERNEL / "kernel.json").read_text())
        NotebookClient(nb, kernel_name=KERNEL, timeout=600, resources={"metadata": {"path": str(root)}}).execute()
    return nb, spec, sample


def outputs(nb, cell_id: str) -> tuple[str, list[dict]]:
    """A cell's printed text and its rich outputs (execute results, displays)."""
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")
    rich = [o.data for o in cell.outputs if o.output_type in ("execute_result", "display_data")]
    return text, rich


def show(text: str) -> str:
    """A string as DataFrame.show() prints it: over 20 characters, the first 17 and "..."."""
    return text if len(text) <= 20 else text[:17] + "..."


def shown_rows(text: str) -> list[list[str]]:
    """The rows of a DataFrame.show() table, cells stripped."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]


def test_kernel_is_this_interpreter(notebook):
    _, spec, _ = notebook
    assert Path(spec["argv"][0]) == Path(sys.executable)
    assert spec["argv"][spec["argv"].index("-m") + 1] == "ipykernel_launcher"


def test_plan_lists_every_generated_partition(notebook):
    nb, _, _ = notebook
    setup, _ = outputs(nb, "setup")
    assert "3 topics, 8 partitions" in setup
    rows = shown_rows(outputs(nb, "plan")[0])
    assert sorted((r[0], int(r[1])) for r in rows) == [
        ("clicks", 0), ("clicks", 1), ("orders", 0), ("orders", 1), ("orders", 2), ("orders", 3), ("users", 0),
        ("users", 1)]
    selected = [r for r in rows if r[5] == "true"]
    assert selected and all(r[1] != "NULL" and "compact" in r[2] for r in selected)
    assert all(r[7] == "not compacted (cleanup.policy has no compact)" for r in rows if r[0] == "clicks")
    _, table = outputs(nb, "selected")
    assert len(table) == 1 and "rank" in table[0]["text/plain"]
    assert table[0]["text/plain"].count("\n") >= len(selected)


def test_plot_is_the_plans_picture(notebook):
    nb, _, _ = notebook
    _, shown = outputs(nb, "plot")
    pixels = image.imread(io.BytesIO(base64.b64decode(shown[0]["image/png"])), format="png")
    assert pixels.shape[:2] == (round(FIGSIZE[1] * DPI), round(FIGSIZE[0] * DPI))
    flat = pixels.reshape(-1, pixels.shape[-1])
    assert (np.abs(flat - flat[0]) > 1e-6).any(axis=1).mean() > 0.01


def test_dry_run_removes_records(notebook):
    nb, _, _ = notebook
    text, result = outputs(nb, "dry-run")
    summary = ast.literal_eval(result[0]["text/plain"])
    assert summary["records_removed"] > 0 and summary["records_read"] > summary["records_removed"]
    assert len(re.findall(r"^Log cleaner thread 0 would clean log ", text, re.M)) == summary["partitions"] > 0


def test_records_read_back_are_kafkas(notebook):
    nb, _, log_dir = notebook
    rows = shown_rows(outputs(nb, "read")[0])
    expected = []
    for log in sorted((log_dir / "orders-0").glob("*.log")):
        for batch in MemoryRecords(log.read_bytes()):
            for r in batch:
                if 100 <= r.offset <= 109:
                    expected.append(("orders", "0", str(r.offset), "NULL" if r.key is None else show(r.key.decode()),
                                     "NULL" if r.value is None else str(len(r.value)),
                                     str(batch.is_control_batch).lower()))
    # columns: topic, partition, offset, timestamp, key, value_bytes, isControl
    assert [(r[0], r[1], r[2], r[4], r[5], r[6]) for r in rows] == expected
    assert [int(e[2]) for e in expected] == list(range(100, 110))


def test_real_compaction_of_a_copy_removed_afterwards(notebook):
    nb, _, _ = notebook
    text, _ = outputs(nb, "compact")
    cleaned = re.findall(r"^Log cleaner thread 0 cleaned log (\S+) ", text, re.M)
    assert cleaned and "users-1" in cleaned
    copy = Path(re.search(r"^copy: (\S+)$", text, re.M)[1])
    removed, _ = outputs(nb, "remove-copy")
    assert removed.strip() == f"removed {copy.parent}" and not copy.parent.exists()


def latest_per_key(partition_dir: Path) -> tuple[int, dict[bytes, tuple[int, bytes | None]]]:
    """kafka-python's reading: keyed data records, and each key's latest (offset, value)."""
    count, latest = 0, {}
    for log in sorted(partition_dir.glob("*.log")):
        for batch in MemoryRecords(log.read_bytes()):
            if batch.is_control_batch:
                continue
            for r in batch:
                if r.key is not None:
                    count += 1
                    latest[r.key] = (r.offset, r.value)
    return count, latest


def test_latest_value_per_key_is_the_same_after_cleaning(notebook):
    nb, _, log_dir = notebook
    count, latest = latest_per_key(log_dir / "users-1")
    text, _ = outputs(nb, "latest")
    summary = re.search(r"^users-1: (\d+) -> (\d+) keyed records; (\d+) keys, (\d+) with another latest", text, re.M)
    before, after, keys, differ = map(int, summary.groups())
    assert (before, keys, differ) == (count, len(latest), 0) and after < before
    rows = shown_rows(text)  # key, offset_before, value_before, offset_after, value_after; the first 10 keys
    expected = sorted(latest.items())[:10]
    assert [r[0] for r in rows] == [show(k.decode()) for k, _ in expected]
    for row, (_, (offset, value)) in zip(rows, expected):
        digest = "NULL" if value is None else hashlib.sha256(value).hexdigest()[:12]
        assert row[1:] == [str(offset), digest, str(offset), digest]


def test_table_cell_writes_the_live_keys(notebook):
    """The table written out holds, per partition of ``users``, the keys whose latest record
    (kafka-python's reading) has a value; the first rows shown are users-1's smallest keys."""
    nb, _, log_dir = notebook
    text, _ = outputs(nb, "table")
    counts = {int(n): int(c) for n, c in re.findall(r"^users-(\d+): (\d+) live keys", text, re.M)}
    live = {}
    for part in sorted(log_dir.glob("users-*")):
        _, latest = latest_per_key(part)
        live[int(part.name.rsplit("-", 1)[1])] = {k: v for k, v in latest.items() if v[1] is not None}
    assert counts == {n: len(keys) for n, keys in live.items()} and all(counts.values())
    expected = sorted(live[1].items())[:5]
    assert [r[:2] for r in shown_rows(text)] == [[show(k.decode()), str(o)] for k, (o, _) in expected]


def test_the_last_cell_leaves_no_temporary_dir(notebook):
    """Every dir the notebook made under the temp dir is gone at its end (issue 43: the sample log
    dir was left behind)."""
    nb, _, _ = notebook
    text, _ = outputs(nb, "stop")
    sample = Path(re.search(r"^removed (\S+)$", text, re.M)[1])
    assert not sample.exists()
    assert not list(sample.parent.glob("kcompact-example-*")), list(sample.parent.iterdir())

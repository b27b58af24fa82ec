"""Nothing kcompact leaves in a log dir is a name a broker rejects or misreads: every name it can
write is in ``logdir.names`` (docs/protocols.md, "Files kcompact adds to a log dir").

- Static: every string literal and f-string of the product's source that looks like a file name,
  or a suffix of one, is a name of the table, or listed below as written elsewhere (with where).
  A new name fails here until the table (and the docs) say what a broker does with it.
- Built: the names the product's own name functions build are known where they are written.
- Traced: a partition's life on local disk (lock, lease, ``.cleaned`` files, the swap, the
  removals, the checkpoint, the last-run stamp, an index rebuilt by recovery), the log dir listed
  after every mutation, i.e. at every point a crash could leave it.
The crash tests (tests/e2e/test_crash_recovery.py, tests/e2e/test_s3_commit.py) check the same on
every log dir their kills leave.
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kcompact import storage
from kcompact.logdir import commits, names
from kcompact.logdir.listing import SEGMENT_KINDS, scan_partition, segment_name
from kcompact.operations import checkpoints, last_run, states, swap
from kcompact.operations.cleaned import WrittenGroup, output_path
from kcompact.operations.recover import recover_partition
from kcompact.readers import checkpoint
from kcompact.tools import generator
from tests.support import patch_storage

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("compaction", "operations", "logdir", "storage", "planner", "jobs", "kcompact", "kernels", "readers",
           "writers", "datasource")
TABLE_MODULE = REPO / "logdir" / "names.py"
DOCS = REPO / "docs" / "protocols.md"

# Name-like strings of the product that are not written into a log dir: where they go instead.
NOT_IN_LOG_DIRS = {
    ".parquet": "a plan, at the path the operator gives (planner/output.py)",
    ".png": "the planner's plot, at the path the operator gives (planner/plot.py)",
    "log4j2.properties": "Spark's logging configuration, shipped in the package (jobs/spark.py)",
    "kcompact-spark-{}-{}.log": "the JVM's output, in the system temp dir (jobs/spark.py)",
    "spark-{}.jsa": "Spark's class-data archive, in the user's cache (jobs/cds.py)",
    "{}.{}.tmp": "that archive's temp file, beside it (jobs/cds.py)",
    "run.json": "the report of the run that trains the class-data archive, in a temp dir (jobs/cds.py)",
    "spark.executorEnv.{}": "a Spark configuration key",
    "kcompact.session.worker_daemon": "the Python workers' daemon, a module's name (jobs/spark.py)",
    "kcompact.compaction.reports.report_html": "a module imported while the JVM starts, a module's name (jobs/cli.py)",
    "{}.{}f": "a number format (compaction/reports/report.py)",
    "{}.html": "the HTML report, beside the JSON report at the operator's path (compaction/reports/report_html.py)",
}
# Modules that write nowhere near a log dir, whatever names they build.
NOT_IN_LOG_DIRS_MODULES = {
    "kernels/cache.py": "numba's cache of compiled kernels: the package's, or numba's cache dir",
    "jobs/kernels.py": "builds the kernels shipped in the package, from a log dir it generates itself",
    "jobs/home.py": "matplotlib's config dir, in the user's home or the temp dir",
    "kcompact/__init__.py": "the API's module names (kcompact.steps...), imported on first use",
}
# What an f-string's placeholder stands for in a sample name (by its source text and format spec).
SAMPLES = {
    "topic": "orders.v2", "partition": "7", "generation:010d": "0000000003", "base_offset:020d": f"{1200:020d}",
    "kind": "log", "final": f"{1200:020d}.log", "owner": "kcompact-0123456789ab", "STAGED": commits.STAGED,
    "nonce": "0123456789abcdef0123456789abcdef",
}
SUFFIX = re.compile(r"\.[A-Za-z][A-Za-z0-9_]*")
WITH_EXTENSION = re.compile(r"[\w{}.+-]*[\w}]\.[A-Za-z]\w*")
DOTTED_KEY = re.compile(r"[a-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)+")  # cleanup.policy, spark.ui.x: no file
FILE_EXTENSIONS = {"json", "tmp", "lock", "log", "index", "timeindex", "txnindex", "snapshot", "cleaned", "swap",
                   "deleted", "staged", "checkpoint", "properties", "metadata", "parquet", "png", "html", "jsa",
                   "txt", "csv"}


# -- the table itself ----------------------------------------------------------------------------


def test_every_entry_knows_its_example_where_it_says():
    for row in names.TABLE:
        assert row.matches(row.example), row.shown
        for where in row.where:
            assert names.entry(row.example, where, row.directory) is row, (row.shown, where)


def test_the_docs_state_every_entry():
    section = DOCS.read_text().split("## Files kcompact adds to a log dir", 1)[1].split("\n## ", 1)[0]
    missing = [row.shown for row in names.TABLE if f"`{row.shown}`" not in section]
    assert not missing, f"rows missing from docs/protocols.md#files-kcompact-adds-to-a-log-dir: {missing}"


def test_what_a_broker_rejects_is_unknown():
    assert names.unknown([
        "lost+found/",  # LogManager.loadLogs: not topic-partition, the broker does not start
        "kcompact-state/",  # a directory where kcompact keeps files
        "orders-x/", "orders/", "-7/", "orders-7.abc-gone/",
        "orders-7/sub/", "orders-7/sub/00000000000000000000.log",  # deeper than a partition dir
        "orders-7/123.log", "orders-7/notes.txt", "orders-7/00000000000000000000.log.bak",
        "orders-7/kcompact-last-run.json",  # a root name in a partition dir
        "00000000000000000000.log",  # a segment at the root
        "kcompact-state.orders-7.json.cleaned", "kcompact-commit.orders-7.3.json",  # generation of 10 digits
        "orders-7/quorum-state",  # KRaft's, in a partition dir
    ]) == ["lost+found/", "kcompact-state/", "orders-x/", "orders/", "-7/", "orders-7.abc-gone/", "orders-7/sub/",
           "orders-7/sub/00000000000000000000.log", "orders-7/123.log", "orders-7/notes.txt",
           "orders-7/00000000000000000000.log.bak", "orders-7/kcompact-last-run.json", "00000000000000000000.log",
           "kcompact-state.orders-7.json.cleaned", "kcompact-commit.orders-7.3.json", "orders-7/quorum-state"]


# -- 1. static: the names the product's source builds -----------------------------------------------


def _shape(node: ast.JoinedStr, samples: bool) -> str:
    """An f-string with each placeholder as ``{}`` (its shape) or as its sample (KeyError if none)."""
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            out.append(str(part.value))
            continue
        spec = "" if part.format_spec is None else ":" + "".join(
            str(v.value) for v in part.format_spec.values if isinstance(v, ast.Constant))
        out.append(SAMPLES[ast.unparse(part.value) + spec] if samples else "{}")
    return "".join(out)


def _name_like(shape: str) -> bool:
    if re.search(r"[\s/%]", shape) or len(shape) > 100:
        return False
    if SUFFIX.fullmatch(shape) or shape.endswith("-checkpoint"):
        return True
    if shape.startswith("kcompact-") and "." in shape:
        return True
    if "}." in shape or ".{" in shape:
        return True
    if not WITH_EXTENSION.fullmatch(shape):
        return False
    return not DOTTED_KEY.fullmatch(shape) or shape.rsplit(".", 1)[1] in FILE_EXTENSIONS


def product_names() -> Iterator[tuple[str, str, ast.AST]]:
    """(where, shape, node) of every name-like literal of the product's source."""
    for folder in PRODUCT:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == TABLE_MODULE or str(path.relative_to(REPO)) in NOT_IN_LOG_DIRS_MODULES:
                continue
            tree = ast.parse(path.read_text(), str(path))
            inner = {id(n) for f in ast.walk(tree) if isinstance(f, ast.JoinedStr) for n in ast.walk(f) if n is not f}
            for node in ast.walk(tree):
                if id(node) in inner:
                    continue
                if isinstance(node, ast.JoinedStr):
                    shape = _shape(node, samples=False)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    shape = node.value
                else:
                    continue
                if _name_like(shape):
                    yield f"{path.relative_to(REPO)}:{node.lineno}", shape, node


def _known_anywhere(name: str) -> bool:
    return any(names.entry(name, where, directory)
               for where in (names.ROOT, names.PARTITION, names.METADATA) for directory in (False, True))


def test_every_name_the_product_builds_is_in_the_table():
    examples = [row.example for row in names.TABLE] + [
        f"{1200:020d}.{kind}{suffix}" for kind in (*SEGMENT_KINDS, "snapshot") for suffix in ("", ".deleted")]
    found, problems = set(), []
    for where, shape, node in product_names():
        found.add(shape)
        if shape in NOT_IN_LOG_DIRS:
            continue
        if SUFFIX.fullmatch(shape):  # a suffix: some name of the table ends with it
            if not any(example.endswith(shape) for example in examples):
                problems.append(f"{where}: suffix {shape!r} ends no name of logdir/names.py")
            continue
        try:
            sample = _shape(node, samples=True) if isinstance(node, ast.JoinedStr) else shape
        except KeyError as exc:
            problems.append(f"{where}: {shape!r}: no sample for the placeholder {exc} (tests: SAMPLES)")
            continue
        if not _known_anywhere(sample):
            problems.append(f"{where}: {shape!r} (as {sample!r}) is no name of logdir/names.py, nor in NOT_IN_LOG_DIRS")
    assert not problems, "\n".join(problems)
    # the scan sees what it must: the builders of kcompact's names and the suffixes it appends
    assert {"kcompact-state.{}-{}.json", "kcompact-commit.{}-{}.{}.json", "kcompact-last-run.json", "{}.{}{}",
            "{}.{}", ".tmp", ".cleaned", ".swap", ".deleted", ".staged", ".lock", "cleaner-offset-checkpoint",
            "log-start-offset-checkpoint"} <= found
    assert not set(NOT_IN_LOG_DIRS) - found, "NOT_IN_LOG_DIRS lists names the source no longer has"


# -- 2. built: the product's name functions -----------------------------------------------------------


def test_the_names_the_product_functions_build_are_known_where_they_are_written():
    owner, base = "kcompact-0123456789ab", 1200
    root = [
        states.file_name("orders.v2", 7), states.file_name("orders.v2", 7) + storage.TMP,
        commits.record_name("orders.v2", 7, 3), last_run.FILE, last_run.FILE + storage.TMP, storage.BROKER_LOCK,
        checkpoint.CLEANER_OFFSET, checkpoint.LOG_START_OFFSET,
        checkpoint.CLEANER_OFFSET + storage.TMP, checkpoint.LOG_START_OFFSET + storage.TMP,
    ]
    partition = []
    for kind in SEGMENT_KINDS:
        final = segment_name(base, kind)
        cleaned = output_path("/logs/orders.v2-7", base, kind, None).rsplit("/", 1)[1]
        staged = output_path("s3://bucket/logs/orders.v2-7", base, kind, owner).rsplit("/", 1)[1]
        assert commits.parse_staged(staged) == (final, owner)
        partition += [final, cleaned, cleaned.removesuffix(".cleaned") + swap.SWAP, final + swap.DELETED, staged]
        if kind != "log":
            partition.append(final + storage.TMP)  # an index rebuilt or trimmed by recovery
    partition.append(segment_name(base, "snapshot") + swap.DELETED)  # retention
    paths = [*root, "orders.v2-7/", *(f"orders.v2-7/{name}" for name in partition)]
    assert names.unknown(paths) == []
    assert {names.entry_of_path(p).broker for p in paths} >= {names.IGNORES, names.READS, names.DELETES,
                                                             names.RECOVERS, names.LOADS}


# -- 3. traced: every state a crash can leave on local disk -------------------------------------------


def listing(log_dir: Path) -> list[str]:
    """Every path under ``log_dir``, relative, directories ending in ``/``."""
    return sorted(f"{p.relative_to(log_dir)}{'/' if p.is_dir() else ''}" for p in log_dir.rglob("*"))


class Trace:
    """The log dir listed after every mutation that goes through ``storage``."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.states: list[tuple[str, list[str]]] = []

    def snap(self, after: str) -> None:
        self.states.append((after, listing(self.log_dir)))


@pytest.fixture
def traced(monkeypatch, tmp_path) -> Trace:
    spec = generator.override(generator.load_spec(None), records=300, segment_bytes=8192)
    spec["topics"] = spec["topics"][:1]
    generator.generate(str(tmp_path / "logs"), spec, seed=7)
    trace = Trace(tmp_path / "logs")
    for op in ("write_durable", "write_file", "rename", "remove", "remove_if", "copy", "truncate"):
        real = getattr(storage, op)

        def wrapped(*args, _real=real, _op=op, **kwargs):
            out = _real(*args, **kwargs)
            trace.snap(f"{_op} {args[-1] if _op in ('rename', 'copy') else args[0]}")
            return out
        patch_storage(monkeypatch, op, wrapped)
    real_create = storage.create_file

    @contextlib.contextmanager
    def create(path, *args, **kwargs):
        with real_create(path, *args, **kwargs) as f:
            trace.snap(f"create {path}")  # the file exists, partly written
            yield f
    patch_storage(monkeypatch, "create_file", create)
    return trace


def test_every_state_of_a_local_cleaning_and_recovery_has_only_known_names(traced):
    log_dir = traced.log_dir
    pdir = log_dir / "orders-0"
    with storage.LogDirLock(str(log_dir)):
        traced.snap("lock")
        lease = states.acquire(str(pdir), "kcompact-0123456789ab")
        replaced = scan_partition(str(pdir), "orders", 0).segments[:2]
        first = replaced[0]
        files = []
        for kind in SEGMENT_KINDS:  # a written group: the first segment's bytes, as .cleaned files
            info = getattr(first, kind)
            if info is not None:
                files.append(output_path(str(pdir), first.base_offset, kind, None))
                with storage.create_file(files[-1]) as f:
                    f.write(storage.read_bytes(info.path))
        group = WrittenGroup(first.base_offset, first.size, 0, 0, tuple(files))
        for path in swap.swap_wave([swap.Swap(str(pdir), [group], replaced)])[0]:
            storage.remove(path)
        checkpoints.update_cleaner_offsets(str(log_dir), lambda e: e | {("orders", 0): replaced[1].base_offset})
        last_run.write(str(log_dir), 1720001000000)
        states.release(lease)
        (pdir / segment_name(first.base_offset, "index")).unlink()
        assert recover_partition(str(pdir)).indexes_rebuilt
    seen = {name for _, paths in traced.states for path in paths for name in [path.rsplit("/", 1)[-1]]}
    for suffix in (".cleaned", ".swap", ".deleted", ".index.tmp"):  # the trace went through every step
        assert any(n.endswith(suffix) for n in seen), suffix
    assert {".lock", "kcompact-state.orders-0.json.tmp", "kcompact-state.orders-0.json",
            "cleaner-offset-checkpoint.tmp", "kcompact-last-run.json.tmp", "kcompact-last-run.json"} <= seen
    problems = {after: bad for after, paths in traced.states if (bad := names.unknown(paths))}
    assert not problems, problems

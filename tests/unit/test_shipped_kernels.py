"""A fresh process compiles no kernel (``kernels.cache``): with numba's cache empty (a new
``NUMBA_CACHE_DIR``, or a new user cache dir for a zip), every kernel of ours finds an entry
shipped for this process's CPU target, and a small compaction through the library (no Spark),
``dump`` and ``verify`` load every kernel they call and compile none. From the source tree, from
a zip of our packages as ``--py-files`` ships them, and from a copy of the packages that nothing
may be written into (a read-only site-packages)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kcompact.kernels import cache
from tests.support import install_layout

REPO = Path(__file__).resolve().parents[2]

# Run in a new process: every kernel of ours (imported by jobs.kernels.kernels), its entries in the
# cache numba now uses for it; then a compaction of one partition as a Spark task of the whole path
# makes it (its inputs pickled: the arrays the kernels get are those of a task), dump and verify,
# and what each kernel's dispatcher counted (numba's cache hits and misses: a miss is a compilation).
PROBE = r"""
import json, os, pickle, sys, tempfile
from pathlib import Path

if os.environ.get("PROBE_PATH"):  # a path entry as pyspark's worker adds one: not made absolute
    sys.path.insert(0, os.environ["PROBE_PATH"])

from kcompact.jobs import kernels
from kcompact.jobs.cli import main
from tests.support import seg_path
from tests.unit.test_clean_partition import _groups, _partition, clean_partition  # wherever it lives now

dispatchers = {kernels.name(d): d for d in kernels.kernels().values()}
unshipped = []
for name, d in sorted(dispatchers.items()):
    magic = d.targetctx.codegen().magic_tuple()
    if not any(key[1] == magic for key in d._cache._cache_file._load_index()):
        unshipped.append(name)
with tempfile.TemporaryDirectory() as tmp:
    part, _ = _partition(Path(tmp))
    groups, keys = _groups(part, segment_bytes=seg_path(part, 0, "log").stat().st_size + 1)
    groups = pickle.loads(pickle.dumps(groups))  # as a Spark task gets them: the kernels see the same arrays
    results = clean_partition(groups, render=True, threads=2, keys=keys)
    assert [r.error for r in results] == [None] * len(results), results
    assert main(["dump", str(part)]) == 0 and main(["verify", tmp]) == 0
stats = {name: d.stats for name, d in dispatchers.items()}
print("PROBE " + json.dumps({
    "files": {name: d.py_func.__code__.co_filename for name, d in dispatchers.items()},
    "cache_paths": sorted({s.cache_path for s in stats.values()}),
    "unshipped": unshipped,
    "hits": {name: sum(s.cache_hits.values()) for name, s in stats.items() if s.cache_hits},
    "misses": {name: [str(sig) for sig in s.cache_misses] for name, s in stats.items() if s.cache_misses},
}))
"""


def _probe(tmp_path: Path, pythonpath: str, **env: str) -> dict:
    """PROBE's findings in a new process whose numba caches are new, empty dirs."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "KCOMPACT_KERNELS"))}
    base |= {"PYTHONPATH": pythonpath, "XDG_CACHE_HOME": str(tmp_path / "user-cache")} | env
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=base, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    return json.loads(line[len("PROBE "):])


def _assert_nothing_compiled(found: dict) -> None:
    stale = "stale since their source changed, or a path jobs/kernels.py's workload does not take: make install"
    assert found["unshipped"] == [], (
        f"kernels with no shipped entry for this CPU target ({stale}): {found['unshipped']}"
    )
    assert found["misses"] == {}, f"compiled in a fresh process ({stale}): {found['misses']}"
    assert len(found["hits"]) >= 10, found["hits"]  # the compaction's kernels came from the cache


@pytest.fixture(scope="module")
def shipped() -> dict:
    manifest = cache.manifest()
    if manifest is None:
        pytest.fail("no shipped kernels (kernels/compiled/target.json): make install builds them "
                    "(python -m kcompact.jobs.kernels)")
    return manifest


def test_a_fresh_cache_dir_compiles_nothing(tmp_path, shipped):
    found = _probe(tmp_path, str(REPO), NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    _assert_nothing_compiled(found)
    assert all(f.startswith(str(REPO / "")) for f in found["files"].values())
    assert found["cache_paths"] and all(p.startswith(str(tmp_path / "numba-cache")) for p in found["cache_paths"])


def test_from_a_zip_compiles_nothing(tmp_path, shipped):
    """Our packages from a zip only (as ``make dist``'s kcompact-py.zip, shipped cache inside),
    named on the path relative to the working dir as Spark's executors name it: numba caches
    zipped code in the user's cache dir, empty here."""
    archive = tmp_path / "kcompact-py.zip"
    layout = install_layout(tmp_path / "layout")
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted(layout.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(layout).as_posix())
    found = _probe(tmp_path, str(REPO), PROBE_PATH=archive.name)
    _assert_nothing_compiled(found)
    assert all(f.startswith(archive.name + os.sep) for f in found["files"].values()), found["files"]
    assert all(p.startswith(str(tmp_path / "user-cache")) for p in found["cache_paths"])


def test_nothing_is_written_beside_the_packages(tmp_path, shipped):
    """A copy of our packages as an install would lay them out: nothing is added to it (the
    shipped files are read, numba's entries go to NUMBA_CACHE_DIR)."""
    site = install_layout(tmp_path / "site")
    before = sorted(p for p in site.rglob("*") if "__pycache__" not in p.parts)
    found = _probe(tmp_path, f"{site}{os.pathsep}{REPO}", NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"),
                   PYTHONDONTWRITEBYTECODE="1")
    _assert_nothing_compiled(found)
    assert all(f.startswith(str(site)) for f in found["files"].values())
    assert sorted(site.rglob("*")) == before


# -- issue 33, item 1: no cache dir numba may write (a broker's system user, a root-owned install) --------
def _no_numba_locator(monkeypatch) -> None:
    """numba's own locators all refuse, as for a user with no writable home, __pycache__ or NUMBA_CACHE_DIR."""
    from numba.core import caching

    for cls in caching.CacheImpl._locator_classes:
        if cls is not cache.ShippedLocator:
            monkeypatch.setattr(cls, "from_function", classmethod(lambda cls, py_func, py_file: None))


def test_with_no_writable_cache_dir_the_kernels_go_to_a_private_one(monkeypatch, tmp_path, shipped):
    """Was: 'cannot cache function '_varint': no locator available', failing the import."""
    import inspect
    import tempfile

    from kcompact.readers import scan

    _no_numba_locator(monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    py_func = scan._varint.py_func
    locator = cache.ShippedLocator.from_function(py_func, inspect.getfile(py_func))
    private = tmp_path / f"kcompact-numba-{os.getuid()}"
    assert locator is not None and locator.get_cache_path().startswith(str(private) + os.sep)
    assert (private.stat().st_mode & 0o777) == 0o700
    assert any(Path(locator.get_cache_path()).glob("*.nbi")), "the shipped kernels were not copied there"


def test_a_private_dir_others_may_write_is_not_used(monkeypatch, tmp_path):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    private = tmp_path / f"kcompact-numba-{os.getuid()}"
    private.mkdir(mode=0o777)
    private.chmod(0o777)
    assert cache.private_dir() is None
    private.chmod(0o700)
    assert cache.private_dir() == str(private)

"""The workers' daemon finds the installed pyspark and py4j before Spark's zip copies of them, and
only where the zips are copies of the packages installed beside them; a failure of its imports is
left to the workers (``session.worker_daemon``)."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from pathlib import Path

from kcompact.session import warm_workers, worker_daemon
from kcompact.session.worker_daemon import installed_first


def _pip_layout(site: Path, py4j_installed: str | None = "0.10.9.9") -> tuple[str, str]:
    """A pip-installed pyspark as it lies in site-packages: the package, its zips, py4j's dist-info."""
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    if py4j_installed:
        (site / f"py4j-{py4j_installed}.dist-info").mkdir()
    for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip"):
        (lib / name).write_bytes(b"PK\x05\x06" + bytes(18))
    return str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")


def test_zips_of_the_installed_packages_go_behind_them(tmp_path):
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = _pip_layout(site)
    entries = ["/work", pyspark_zip, py4j_zip, "/usr/lib/python311.zip", "/usr/lib/python3.11", str(site)]
    assert installed_first(entries) == ["/work", "/usr/lib/python311.zip", "/usr/lib/python3.11", str(site),
                                        pyspark_zip, py4j_zip]


def test_a_py4j_zip_of_another_version_than_installed_stays_first(tmp_path):
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = _pip_layout(site, py4j_installed="0.10.9.7")
    entries = [pyspark_zip, py4j_zip, str(site)]
    assert installed_first(entries) == [py4j_zip, str(site), pyspark_zip]


def test_a_clusters_own_spark_home_stays_first(tmp_path):
    site = tmp_path / "site-packages"
    _pip_layout(site)  # a pyspark pip installed, not the Spark whose zips the path names
    lib = tmp_path / "opt" / "spark" / "python" / "lib"
    lib.mkdir(parents=True)
    entries = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), str(site)]
    assert installed_first(entries) == entries


def test_zips_whose_site_dir_is_not_on_the_path_stay_first(tmp_path):
    pyspark_zip, py4j_zip = _pip_layout(tmp_path / "site-packages")
    entries = [pyspark_zip, py4j_zip, "/usr/lib/python3.11"]
    assert installed_first(entries) == entries


def test_a_daemon_whose_imports_fail_forks_its_workers_unprepared(monkeypatch):
    """The workers then import for themselves and their task says what failed: the daemon
    neither raises nor freezes what a failed import left half made."""
    def broken():
        raise ImportError("no module named numba")

    monkeypatch.setattr(warm_workers, "prepare", broken)
    frozen = gc.get_freeze_count()
    worker_daemon._prepare_workers()
    assert gc.get_freeze_count() == frozen


def test_what_the_daemons_imports_print_goes_to_its_standard_error():
    """Its standard output is where Spark reads the daemon's port: numba's ``NUMBA_DEBUG_CACHE``
    lines there made every task of the broker's user fail (``Bad data in ...'s standard output``)."""
    code = textwrap.dedent("""
        import os
        from kcompact.session import warm_workers, worker_daemon

        def noisy():
            print("[cache] data saved to ...")
            os.write(1, b"written to fd 1\\n")

        warm_workers.prepare = noisy
        worker_daemon._prepare_workers()
        print("port")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "port\n"
    assert done.stderr == "[cache] data saved to ...\nwritten to fd 1\n"

"""The workers' daemon finds the installed pyspark and py4j before Spark's zip copies of them, and
only where the zips are copies of the packages installed beside them (``session.worker_daemon``)."""

from __future__ import annotations

from pathlib import Path

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

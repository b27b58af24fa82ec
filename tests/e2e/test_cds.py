"""The JVM class-data archive of embedded Spark (jobs/cds.py): used when present and wanted,
and harmless when it does not fit: the JVM maps it or ignores it without a word."""

from __future__ import annotations

import subprocess

import pytest

from kcompact.jobs import cds


def test_options_name_the_archive_only_when_it_exists_and_is_wanted(monkeypatch, tmp_path):
    archive = tmp_path / "spark.jsa"
    monkeypatch.setattr(cds, "archive", lambda: archive)
    monkeypatch.delenv("KCOMPACT_CDS", raising=False)
    assert cds.java_options() == ""
    archive.write_bytes(b"an archive")
    assert cds.java_options() == f"-XX:SharedArchiveFile={archive}"
    monkeypatch.setenv("KCOMPACT_CDS", "off")
    assert cds.java_options() == ""


def test_a_training_run_maps_no_archive_and_its_archive_replaces_the_old_whole(monkeypatch, tmp_path, capsys):
    """A JVM that maps a dynamic archive dumps none: the training run maps none. What it wrote
    takes the archive's place in one rename; a run that wrote nothing leaves the old one."""
    archive = tmp_path / "share" / "spark.jsa"
    monkeypatch.setattr(cds, "archive", lambda: archive)
    partial = cds.partial()
    assert partial.parent == archive.parent and partial != archive
    env = cds.training_env(partial)
    assert env["KCOMPACT_CDS"] == "off" and f"-XX:ArchiveClassesAtExit={partial}" in env["JDK_JAVA_OPTIONS"].split()
    cds.keep(partial)
    assert not archive.exists() and f"the JVM wrote no {partial}" in capsys.readouterr().err
    archive.write_bytes(b"old")
    cds.keep(partial)
    assert archive.read_bytes() == b"old"
    partial.write_bytes(b"new")
    cds.keep(partial)
    assert archive.read_bytes() == b"new" and not partial.exists()
    assert f"{archive} (0 MB)" in capsys.readouterr().out


@pytest.mark.parametrize("content", [None, b"not an archive", b"\0" * 4096])
def test_a_missing_or_foreign_archive_is_ignored_silently(tmp_path, content):
    """What jobs rely on: a stale archive (another Java, another Spark) costs nothing but time."""
    archive = tmp_path / "spark.jsa"
    if content is not None:
        archive.write_bytes(content)
    done = subprocess.run(["java", f"-XX:SharedArchiveFile={archive}", "-version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == ""
    assert [line for line in done.stderr.splitlines() if "cds" in line.lower() or "shar" in line.lower()] == []


def test_jobs_map_the_installed_archive(tmp_path):
    """``make install`` built it, and a job's JVM maps it: with -Xshare:on a JVM that cannot map
    its archive (another class path, another Java) refuses to start."""
    import os
    import sys

    from kcompact.jobs import cli

    archive = cds.archive()
    if not archive.is_file():
        pytest.fail(f"{archive} missing: `make install` builds it (python -m kcompact.jobs.kernels)")
    assert cli.main(["gen", "--out", str(tmp_path / "logs"), "--records", "200", "--partitions", "1"]) == 0
    env = os.environ | {"JDK_JAVA_OPTIONS": "-Xshare:on", "KCOMPACT_CDS": "on"}
    done = subprocess.run([sys.executable, "-m", "kcompact.jobs.cli", "plan", str(tmp_path / "logs")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 partitions" in done.stdout

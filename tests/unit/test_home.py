"""A user with no usable home gets a private matplotlib dir, so plots draw without matplotlib's
warning (jobs/home.py); a usable default or an operator's MPLCONFIGDIR is left alone."""

from __future__ import annotations

import os
import stat
import tempfile

from kcompact.jobs import home


def test_no_usable_config_dir_gives_a_private_one(monkeypatch, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")  # ~/.config cannot be made under a file, even by root
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocker))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    home.settle_matplotlib()
    private = tmp_path / f"kcompact-matplotlib-{os.getuid()}"
    assert os.environ["MPLCONFIGDIR"] == str(private)
    assert stat.S_IMODE(private.stat().st_mode) == 0o700


def test_a_usable_default_or_a_given_dir_is_kept(monkeypatch, tmp_path):
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    home.settle_matplotlib()
    assert "MPLCONFIGDIR" not in os.environ and (tmp_path / "config" / "matplotlib").is_dir()
    monkeypatch.setenv("MPLCONFIGDIR", "/given")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "file"))
    home.settle_matplotlib()
    assert os.environ["MPLCONFIGDIR"] == "/given"

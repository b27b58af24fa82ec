"""The modules a command imports later, imported on a thread while the JVM starts (jobs.spark.session)."""

from __future__ import annotations

import importlib.util
import sys
import threading

from kcompact.jobs import cli, spark


def test_every_module_warmed_exists():
    """A name that no longer names a module would be skipped in silence, its import paid later."""
    names = {*spark.PYSPARK_LATER, cli._REPORT, *(name for names in cli._LATER.values() for name in names)}
    assert all(importlib.util.find_spec(name) is not None for name in names), names


def test_modules_are_imported_on_another_thread_while_the_body_runs(monkeypatch, tmp_path):
    (tmp_path / "warm_probe_a.py").write_text("import threading\nTHREAD = threading.current_thread().name\n")
    (tmp_path / "warm_probe_b.py").write_text("raise ImportError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("warm_probe_a", "warm_probe_b"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with spark._warmed(("warm_probe_b", "warm_probe_a")):  # a module that fails does not stop the others
        pass
    assert sys.modules["warm_probe_a"].THREAD == "kcompact-warm-imports"
    assert "warm_probe_b" not in sys.modules
    assert not [t for t in threading.enumerate() if t.name == "kcompact-warm-imports"]  # waited for


def test_nothing_warmed_starts_no_thread(monkeypatch):
    started = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self))
    with spark._warmed(()):
        pass
    assert started == []

"""A command's process lets its long-lived objects grow without the collector's full passes over
them; a process that goes on after a command (this one) keeps the interpreter's setting."""

import gc
import subprocess
import sys

from kcompact.jobs import cli, collector

# A driver's growth in miniature: long-lived containers, kept to the end, counting full passes
GROWING = """
import gc, sys
full = []
gc.callbacks.append(lambda phase, info: phase == "stop" and info["generation"] == 2 and full.append(1))
if sys.argv[1] == "command":
    from kcompact.jobs import collector
    collector.for_one_command()
kept = [{"row": (i, [i])} for i in range(300_000)]
print(len(full))
"""


def _full_passes(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", GROWING, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_a_growing_heap_is_walked_whole_by_default_and_not_in_a_command():
    assert _full_passes("default") >= 3  # the cost the setting removes, seen first
    assert _full_passes("command") == 0


def test_the_console_script_sets_its_collector(tmp_path):
    probe = ("import gc, sys; from kcompact.jobs import cli; "
             f"code = cli.main(['dump', {str(tmp_path / 'missing.log')!r}], own_process=True); "
             "print(code, gc.get_threshold()[2], gc.get_freeze_count() > 0)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2", str(collector.FULL_PASS_EVERY), "True"]


def test_a_command_called_in_a_process_that_goes_on_leaves_the_collector_alone(tmp_path):
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    assert cli.main(["dump", str(tmp_path / "missing.log")]) == 2
    assert (gc.get_threshold(), gc.get_freeze_count()) == (before, frozen)

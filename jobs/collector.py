"""Python's cyclic garbage collector in a process that lives for one command.

The driver keeps nearly all it makes until the command ends: the plan's rows, every partition's
batch plans, its results and report rows. The collector's full pass walks every object the
process holds, and CPython starts one whenever the old objects have grown by a quarter, so a
driver whose objects grow with the partitions walks them again and again, more often and longer
the more partitions, for garbage that does not grow with them (the reference cycles pyspark,
py4j and the imports leave). A command's process therefore freezes what its imports made (never
walked again) and lets a full pass come only after ``FULL_PASS_EVERY`` passes of the middle
generation; the young passes, over recent objects only, go on as before. A process that goes on
after a command (a notebook, a test) keeps the interpreter's setting.
"""

from __future__ import annotations

import gc

FULL_PASS_EVERY = 1000  # middle-generation passes before a full one may start (CPython's default: 10)


def for_one_command() -> None:
    """This process's collector set for one command's driver."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_PASS_EVERY)

"""Whether a failure is a task running out of memory, recognised here and nowhere else.

In a task it is a ``MemoryError``, an allocation the system refused (``ENOMEM``: a capped address
space's mmap) or a thread whose stack could not be mapped (Python's ``RuntimeError``, which only
its text tells apart). On the driver a Spark job that failed so reaches Python as Spark's own
exception, which carries the worker's traceback (or the JVM's ``OutOfMemoryError``) as text only.
"""

from __future__ import annotations

import errno

THREAD_NOT_STARTED = "can't start new thread"  # Python's RuntimeError when a thread's stack cannot be mapped
# How a worker's traceback or the JVM's error names each of the cases above
_SPARK_SIGNS = ("MemoryError", "ENOMEM", "Cannot allocate memory", THREAD_NOT_STARTED)
_SPARK_MODULES = ("pyspark.", "py4j.")


def out_of_memory(exc: BaseException) -> bool:
    """``exc`` is a task's (or the JVM's) failure to get memory, raised here or in a Spark job."""
    if (isinstance(exc, MemoryError) or getattr(exc, "errno", None) == errno.ENOMEM
            or (isinstance(exc, RuntimeError) and THREAD_NOT_STARTED in str(exc))):
        return True
    return _from_spark(exc) and any(sign in str(exc) for sign in _SPARK_SIGNS)


def _from_spark(exc: BaseException) -> bool:
    """Spark's exception for a job that failed (pyspark's, or py4j's for the JVM), whose text is all
    that crossed from the worker; told by its module, so that this layer imports no Spark."""
    return any(cls.__module__.startswith(_SPARK_MODULES) for cls in type(exc).__mro__)

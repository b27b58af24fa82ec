"""The one unit of size this tool prints: MB = 2^20 bytes, as Kafka's cleaner writes MB in its log
(LogCleaner: bytes / (1024 * 1024)). Console lines, plans, JSON reports and HTML pages all use
it, so a figure read in one can be compared with the same figure in another."""

MB = 1 << 20
UNIT_NOTE = "MB = 2^20 bytes (as Kafka's cleaner log)"


_SPARK_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def spark_size(text: str) -> int:
    """Bytes of a size as Spark's memory settings take it (``512m``, ``2g``, ``1.5g``; a bare
    number is mebibytes)."""
    value = text.strip().lower().removesuffix("b")
    try:
        size = int(float(value[:-1]) * _SPARK_UNITS[value[-1]]) if value[-1:] in _SPARK_UNITS else int(value) << 20
    except ValueError:
        raise ValueError(f"{text!r} is not a size (for example 512m or 2g)") from None
    if size < 0:
        raise ValueError(f"{text!r} is not a size (for example 512m or 2g)")
    return size

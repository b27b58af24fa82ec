"""The one unit of size this tool prints: MB = 2^20 bytes, as Kafka's cleaner writes MB in its log
(LogCleaner: bytes / (1024 * 1024)). Console lines, plans, JSON reports and HTML pages all use
it, so a figure read in one can be compared with the same figure in another."""

MB = 1 << 20
UNIT_NOTE = "MB = 2^20 bytes (as Kafka's cleaner log)"


def mb(size: int | float) -> float:
    return size / MB

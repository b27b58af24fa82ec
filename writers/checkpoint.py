"""Kafka's offset checkpoint files, rendered: version, entry count, ``topic partition offset``
lines in a stable order (parsed by ``readers.checkpoint``)."""

from __future__ import annotations

from kcompact.readers.checkpoint import VERSION


def render_checkpoint(entries: dict[tuple[str, int], int]) -> bytes:
    body = "".join(f"{topic} {partition} {offset}\n" for (topic, partition), offset in sorted(entries.items()))
    return f"{VERSION}\n{len(entries)}\n{body}".encode()

"""A topic's ``cleanup.policy``: Kafka's list of ``compact`` and ``delete``, as a topic's resolved
config holds it (a tuple) or as a plan's row holds it (the names joined by commas)."""

from __future__ import annotations

from collections.abc import Iterable


def policies(cleanup_policy: str | Iterable[str] | None) -> tuple[str, ...]:
    """The policy names: a string split on commas and trimmed, as Kafka reads a list setting."""
    if cleanup_policy is None:
        return ()
    names = cleanup_policy.split(",") if isinstance(cleanup_policy, str) else cleanup_policy
    return tuple(name.strip() for name in names if name.strip())


def is_compacted(cleanup_policy: str | Iterable[str] | None) -> bool:
    """The log cleaner compacts the topic (``compact`` among its policies)."""
    return "compact" in policies(cleanup_policy)


def is_deleted(cleanup_policy: str | Iterable[str] | None) -> bool:
    """Retention by time and size applies to the topic (``delete`` among its policies)."""
    return "delete" in policies(cleanup_policy)

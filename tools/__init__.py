"""Operator and test tools over log dirs: ``dump`` (DumpLogSegments' view), ``verify`` (every
problem by file and byte) and ``generator`` (sample log dirs and the truth of what they hold)."""

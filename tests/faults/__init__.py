"""Test-only fault injection: SIGKILL at chosen storage mutations (crash_points), and a driver
that reproduces a compaction commit or a recovery under it (fork_driver)."""

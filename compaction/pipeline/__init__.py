"""The compaction job on Spark: its stages and tasks, the memory model that routes each partition, its
settings, and the driver's orchestration (taking the partitions, leases, checkpoint resets, the
commit)."""

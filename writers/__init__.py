"""Writing Kafka's on-disk format: record batches, segments with their indexes,
checkpoints, and sample log dirs for tests and demos."""

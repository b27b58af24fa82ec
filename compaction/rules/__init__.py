"""Kafka's cleaner rules as pure functions over values: what each batch and record keeps (testable
without Spark or files)."""

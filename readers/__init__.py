"""Decoding Kafka's on-disk format: record batches of every magic and codec, the three index
files, checkpoint files, producer snapshots, KRaft metadata records. The bottom layer: these
modules take bytes or file objects and import neither Spark, fsspec nor ``storage``; their
encoding twins are in ``writers``."""

"""Encoding Kafka's on-disk format: v2 and legacy batches, rebuilt and emptied batches, segments
with their indexes by the broker's rules, index files, checkpoints, producer snapshots, KRaft
metadata records, compression. The bottom layer beside ``readers`` (whose decoders they may
use): no Spark, fsspec or ``storage``."""

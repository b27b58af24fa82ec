"""Reading Kafka's on-disk format: record batches of every magic and codec, index
files, checkpoints, and listings of log dirs. The byte-format modules here take
bytes or file objects and import neither Spark nor fsspec."""

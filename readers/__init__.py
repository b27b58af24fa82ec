"""Reading Kafka's on-disk format: record batches of every magic and codec, index
files, checkpoints, and listings of log dirs. The byte-format modules here take
bytes or file objects and import neither Spark nor fsspec."""


def __getattr__(name: str):
    """``readers.KafkaLogDataSource``, imported on first use: importing ``readers`` must not start
    importing Spark."""
    if name == "KafkaLogDataSource":
        from readers.datasource import KafkaLogDataSource

        return KafkaLogDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

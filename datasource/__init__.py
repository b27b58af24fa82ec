"""The ``kafka-log`` Spark data source: Kafka log dirs read in place, local or ``s3://``."""

"""What Kafka's cleaner keeps, record by record and batch by batch: Kafka's rules as pure
functions (testable without Spark), beside the Spark pipeline that applies them."""

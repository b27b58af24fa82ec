"""Kafka's choice of what to clean (LogCleanerManager.grabFilthiestCompactedLog), computed
for every partition of one or many log dirs at once as a Spark DataFrame."""

"""Configuration: Kafka's settings for cleaning and retention, with Kafka's names and
defaults, and where each effective value comes from."""

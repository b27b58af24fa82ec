"""The Spark session as the product uses it, classic or Spark Connect (``session.kinds``)."""

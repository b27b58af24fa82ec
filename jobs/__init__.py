"""Entry points: the ``kcompact`` command line and the spark-submit jobs (thin wrappers)."""

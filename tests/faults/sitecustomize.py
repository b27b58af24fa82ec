"""Put this folder on PYTHONPATH of a kcompact process to inject crashes into it and into every
Python process it starts (Spark's workers inherit PYTHONPATH): see crash_points."""

import crash_points

crash_points.install_from_env()

"""spark-submit entry point of the planner: ``spark-submit jobs/plan.py LOGDIR... [options]``
takes the same options as ``kcompact plan``."""

import sys

from kcompact.jobs.cli import main

if __name__ == "__main__":
    sys.exit(main(["plan", *sys.argv[1:]], own_process=True))

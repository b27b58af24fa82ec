"""spark-submit entry point of retention: ``spark-submit jobs/retain.py LOGDIR... [options]``
takes the same options as ``kcompact retain``."""

import sys

from kcompact.jobs.cli import main

if __name__ == "__main__":
    sys.exit(main(["retain", *sys.argv[1:]], own_process=True))

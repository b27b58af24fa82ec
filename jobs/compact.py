"""spark-submit entry point of the compaction job: ``spark-submit jobs/compact.py LOGDIR... [options]``
takes the same options as ``kcompact compact``."""

import sys

from kcompact.jobs.cli import main

if __name__ == "__main__":
    sys.exit(main(["compact", *sys.argv[1:]], own_process=True))

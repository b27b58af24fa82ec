"""spark-submit entry point of crash recovery: ``spark-submit jobs/recover.py LOGDIR... [--report FILE]``
takes the same options as ``kcompact recover`` (it needs no Spark; the script is there so that a
pipeline of spark-submit steps can start with it)."""

import sys

from kcompact.jobs.cli import main

if __name__ == "__main__":
    sys.exit(main(["recover", *sys.argv[1:]], own_process=True))

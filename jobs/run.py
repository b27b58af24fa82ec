"""spark-submit entry point of the nightly job: ``spark-submit jobs/run.py LOGDIR... [options]``
takes the same options as ``kcompact run``. The steps (recovery, retention, plan, compaction) are
``kcompact.run``'s."""

import sys

from kcompact.jobs.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]], own_process=True))

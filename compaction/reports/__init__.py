"""What people read of a run: the compaction report, the HTML report (of compaction, retention and
recovery) and the ``kcompact status`` view."""

"""An executable model of one cleaning round of Kafka's log cleaner, for one log dir, as each
release from 3.9.0 to 4.4 cleans (the rules that differ are read from ``conf.releases``: the
index entries per append or per batch, the round's last emptied batch).

Transcribed from Kafka's rules as plainly as possible, per record and per batch, in the order
``LogCleaner`` works: ``grabFilthiestCompactedLog`` (``manager``), ``buildOffsetMap``,
``groupSegmentsBySize``, ``cleanSegments``/``cleanInto`` with ``filterTo``'s batch rules and its
read chunks (``cleaner``), ``LogSegment.append``'s index rule and the swap (``log``), the
broker's producer state (``producers``), the bytes of rebuilt batches (``encode``). Each function
names the Kafka method it transcribes.

It shares no code with ``compaction/``, ``planner/`` or ``writers/``: it reads files with the
byte readers only and writes bytes with its own encoder. It is slow (a Python loop per record)
and meant to be obviously right. Its keys are exact and its offset map unlimited: that is how
the product is specified to differ from Kafka.

Use: ``Broker(log_dir, Config(topics, broker), release).clean_round(now)`` cleans the dir in place;
``observe_appends()`` after producers appended to it; the same ``Broker`` for the next round.
"""

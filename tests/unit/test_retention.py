"""Kafka's retention rules (UnifiedLog.deleteOldSegments) as pure functions, against
expectations worked out by hand from Kafka's code and docs/compaction-semantics.md "Retention".

Every log here: segments at base offsets 0, 10, 20, ... (10 offsets each), the last one
active. now = 10_000 and retention.ms = 1000 unless a test says otherwise, so a segment goes by
time when its largest timestamp < 9000 (now - ts > 1000, strictly).
"""

from __future__ import annotations

from kcompact.planner.retention import LOG_START, SIZE, TIME, plan_deletion
from kcompact.planner.rules import SegmentFacts

NOW = 10_000
OFF = -1  # retention.ms / retention.bytes disabled


def seg(base: int, size: int = 100, ts: int | None = None, mtime: int = 0) -> SegmentFacts:
    return SegmentFacts(base, size, mtime, largest_timestamp=ts)


def run(segments, *, log_start=None, delete=True, ms=OFF, bytes_=OFF, now=NOW):
    d = plan_deletion(segments, log_start=segments[0].base_offset if log_start is None else log_start,
                      delete_policy=delete, retention_ms=ms, retention_bytes=bytes_, now=now)
    return list(d.reasons), d.new_log_start


# -- retention.ms -----------------------------------------------------------------------------
def test_time_rule_stops_at_the_first_segment_inside_the_bound():
    # 0: 10000 - 8000 = 2000 > 1000 -> goes; 10: 10000 - 9000 = 1000, not > 1000 -> stays (the bound
    # is strict); 20 is older (5000) but comes after a segment that stays: a prefix only
    log = [seg(0, ts=8000), seg(10, ts=9000), seg(20, ts=5000), seg(30, ts=1)]
    assert run(log, ms=1000) == ([(0, TIME)], 10)


def test_time_rule_one_ms_past_the_bound():
    # 10: 10000 - 8999 = 1001 > 1000 -> goes, so does 20 (5000); 30 is active: it stays although expired
    log = [seg(0, ts=8000), seg(10, ts=8999), seg(20, ts=5000), seg(30, ts=1)]
    assert run(log, ms=1000) == ([(0, TIME), (10, TIME), (20, TIME)], 30)


def test_time_rule_retention_ms_zero_takes_every_past_segment():
    # retention.ms = 0 is a real bound (only -1 disables): 10000 - 9999 = 1 > 0; 10000 - 10000 = 0 is not
    log = [seg(0, ts=9999), seg(10, ts=10_000), seg(20, ts=1)]
    assert run(log, ms=0) == ([(0, TIME)], 10)


def test_mtime_when_a_segment_has_no_timestamps():
    # 0: no time index read (None) -> mtime 1000: 9000 > 1000 -> goes;
    # 10: time index without timestamps (-1, Kafka's NO_TIMESTAMP) -> mtime 8500: 1500 > 1000 -> goes;
    # 20: no timestamps, mtime 9500: 500 -> stays
    log = [seg(0, ts=None, mtime=1000), seg(10, ts=-1, mtime=8500), seg(20, ts=-1, mtime=9500), seg(30)]
    assert run(log, ms=1000) == ([(0, TIME), (10, TIME)], 20)


def test_timestamp_wins_over_mtime_when_there_is_one():
    # 0: largest timestamp 9500 (recent) although its file is ancient (mtime 0) -> stays
    log = [seg(0, ts=9500, mtime=0), seg(10)]
    assert run(log, ms=1000) == ([], 0)


# -- retention.bytes --------------------------------------------------------------------------
def test_size_rule_exactly_at_the_boundary():
    # total 100 + 100 + 100 + 50 = 350; retention.bytes 150 -> diff 200: 0 goes (200 - 100 = 100 >= 0),
    # 10 goes (100 - 100 = 0 >= 0), 20 stays (0 - 100 < 0); left: 150 bytes, exactly retention.bytes
    log = [seg(0), seg(10), seg(20), seg(30, size=50)]
    assert run(log, bytes_=150) == ([(0, SIZE), (10, SIZE)], 20)


def test_size_rule_one_byte_more_keeps_one_more_segment():
    # retention.bytes 151 -> diff 199: 0 goes (99), 10 would leave -1 -> stays
    log = [seg(0), seg(10), seg(20), seg(30, size=50)]
    assert run(log, bytes_=151) == ([(0, SIZE)], 10)


def test_size_rule_log_at_or_under_retention_bytes():
    log = [seg(0), seg(10), seg(20), seg(30, size=50)]
    assert run(log, bytes_=350) == ([], 0)  # diff 0: no segment of 100 bytes fits
    assert run(log, bytes_=351) == ([], 0)  # size < retention.bytes: nothing to do


def test_size_rule_counts_the_active_segment_but_never_deletes_it():
    # retention.bytes 0: diff 350, 0/10/20 go (250, 150, 50 left), then the active segment: 50 - 50 >= 0
    # would let it go in the size arithmetic, but the active segment is never deleted here
    log = [seg(0), seg(10), seg(20), seg(30, size=50)]
    assert run(log, bytes_=0) == ([(0, SIZE), (10, SIZE), (20, SIZE)], 30)


# -- the log start offset ---------------------------------------------------------------------
def test_log_start_in_the_middle_of_a_segment_keeps_that_segment():
    # log start 15: 0 goes (next base 10 <= 15); 10 holds 15 (next base 20 > 15) -> stays;
    # the log start stays 15 = max(15, first remaining base 10)
    log = [seg(0), seg(10), seg(20), seg(30)]
    assert run(log, log_start=15) == ([(0, LOG_START)], 15)


def test_log_start_on_a_segment_boundary():
    # log start 20: 0 (next 10 <= 20) and 10 (next 20 <= 20) go
    log = [seg(0), seg(10), seg(20), seg(30)]
    assert run(log, log_start=20) == ([(0, LOG_START), (10, LOG_START)], 20)


def test_log_start_inside_the_active_segment():
    # deleteRecords moved the log start to 35, inside the active segment 30: every closed segment
    # goes, the active one stays, the log start stays 35
    log = [seg(0), seg(10), seg(20), seg(30)]
    assert run(log, log_start=35) == ([(0, LOG_START), (10, LOG_START), (20, LOG_START)], 35)


# -- what never goes, what is disabled --------------------------------------------------------------
def test_minus_one_disables_size_and_time():
    log = [seg(0, ts=1), seg(10, ts=1), seg(20, ts=1)]  # ancient, and 300 bytes
    assert run(log, ms=-1, bytes_=-1) == ([], 0)
    assert run(log, ms=-1, bytes_=0) == ([(0, SIZE), (10, SIZE)], 20)
    assert run(log, ms=0, bytes_=-1) == ([(0, TIME), (10, TIME)], 20)


def test_active_segment_never_deleted_even_when_expired():
    assert run([seg(0, ts=1, mtime=1)], ms=0, bytes_=0) == ([], 0)  # a log of one (active) segment
    log = [seg(0, ts=1), seg(10, ts=1)]
    assert run(log, ms=0) == ([(0, TIME)], 10)


def test_empty_log():
    d = plan_deletion([], log_start=7, delete_policy=True, retention_ms=0, retention_bytes=0, now=NOW)
    assert (d.reasons, d.new_log_start) == ((), 7)


def test_compact_only_applies_the_log_start_rule_alone():
    # cleanup.policy=compact: retention.ms = 0 and retention.bytes = 0 would take everything, but
    # only the log start offset (12) applies: segment 0 goes (next base 10 <= 12), nothing else
    log = [seg(0, ts=1), seg(10, ts=1), seg(20, ts=1), seg(30)]
    assert run(log, log_start=12, delete=False, ms=0, bytes_=0) == ([(0, LOG_START)], 12)
    assert run(log, delete=False, ms=0, bytes_=0) == ([], 0)


# -- the order: log start, then size, then time, each from where the previous one stopped ---------
def test_rules_applied_in_order_each_continuing():
    # five segments of 100 bytes (40 active); log start 10; retention.bytes 250; retention.ms 1000.
    # 1. log start: 0 goes (next base 10 <= 10), 10 stays.
    # 2. size, over what is left (10..40 = 400, not 500): diff 150 -> 10 goes (50), 20 stays (-50).
    #    (Counting segment 0 too would give diff 250 and take 20 by size as well.)
    # 3. time, from 20: 20 is old (ts 100) -> goes; 30 is recent (9900) -> stays. Segment 10 is recent
    #    (9950): the time rule alone would have stopped there, but the size rule already took it.
    log = [seg(0, ts=9990), seg(10, ts=9950), seg(20, ts=100), seg(30, ts=9900), seg(40, ts=9999)]
    assert run(log, log_start=10, bytes_=250, ms=1000) == ([(0, LOG_START), (10, SIZE), (20, TIME)], 30)


def test_size_after_log_start_counts_only_what_is_left():
    # log start 20 takes 0 and 10; left 20, 30 (active) = 200 bytes; retention.bytes 150 -> diff 50:
    # 20 (100) does not fit -> stays. Counting the deleted ones (400 - 150 = 250) would take 20 too.
    log = [seg(0), seg(10), seg(20), seg(30)]
    assert run(log, log_start=20, bytes_=150) == ([(0, LOG_START), (10, LOG_START)], 20)


def test_by_rule_counts():
    log = [seg(0, ts=9990), seg(10, ts=9950), seg(20, ts=100), seg(30, ts=9900), seg(40, ts=9999)]
    d = plan_deletion(log, log_start=10, delete_policy=True, retention_ms=1000, retention_bytes=250, now=NOW)
    assert d.by_rule() == {LOG_START: 1, SIZE: 1, TIME: 1}
    assert d.bases == [0, 10, 20]

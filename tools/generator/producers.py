"""One partition's producers, played against one random stream: plain, idempotent and
transactional producers (commits, aborts, epoch bumps, leader changes), optionally after an old
broker's magic-0/1 messages, each batch encoded as the producer and broker would leave it."""

from __future__ import annotations

import bisect
import dataclasses
import random
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from kcompact.readers import codecs
from kcompact.readers.batch import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP
from kcompact.readers.indexes import AbortedTxn
from kcompact.readers.records import ABORT, COMMIT, Record, control_key, control_value
from kcompact.tools.generator import progress
from kcompact.tools.generator.spec import _INT32_MAX
from kcompact.tools.generator.truth import WrittenBatch, WrittenRecord, _Encoded
from kcompact.writers import legacy
from kcompact.writers.batch import encode_batch

IDEMPOTENT_PID_BASE = 598000
TRANSACTIONAL_PID_BASE = 598500
LOG_APPEND_DELAY_MS = 5  # log_append_time topics: the broker appends a batch this long after its last record
COORDINATOR_EPOCH = 0
_WORDS = (
    "alfa", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "0", "1", "2", "3", "42", "1000",
)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Word salad draws a word as ``random.choice`` does (``getrandbits`` of the count's bit length, again
# while out of range): the same words from the same seed, without two Python calls per word.
_WORD_BITS = len(_WORDS).bit_length()
_WORD_ROOM = tuple(len(w) + 1 for w in _WORDS)  # a word and the space after it


@dataclass(frozen=True, slots=True)
class _Producer:
    producer_id: int
    epoch: int  # the first epoch; an epoch bump moves _PartitionProducer.epochs on
    transactional: bool


@dataclass(slots=True)
class _OpenTxn:
    first_offset: int
    batches_left: int


@dataclass(slots=True)
class _PartitionProducer:
    """Plays a partition's producers against one random stream, batch by batch. With
    ``append_records`` the stream goes on after ``records`` data records: ``cut`` is the index of
    the first batch written after that point (appended between cleaning rounds)."""

    topic: dict[str, Any]
    rng: random.Random
    keep_open: bool
    keep_records: bool = True  # False: no per-record truth (a benchmark corpus of millions)
    offset: int = 0
    records: list[WrittenRecord] = field(default_factory=list)
    encoded: list[_Encoded] = field(default_factory=list)
    sequences: dict[int, int] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)
    open_txns: dict[int, _OpenTxn] = field(default_factory=dict)
    cut: int | None = None
    leader_epoch: int = 0
    leader_epochs: dict[int, int] = field(default_factory=dict)  # epoch -> first offset (leader-epoch-checkpoint)
    _key_cdf: list[float] = field(default_factory=list)
    _key_sizes: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.topic["key_distribution"] == "skewed":
            s = self.topic["key_skew"]
            self._key_cdf = list(accumulate((k + 1) ** -s for k in range(self.topic["keys"])))

    def run(self) -> None:
        t = self.topic
        if t["legacy"]:
            self._legacy()
        plain = _Producer(-1, -1, False)
        idempotent = [_Producer(IDEMPOTENT_PID_BASE + i, 0, False) for i in range(t["idempotent_producers"])]
        txn = [_Producer(TRANSACTIONAL_PID_BASE + i, 1 + i, True) for i in range(t["transactional_producers"])]
        remaining = t["records"] + t["append_records"]
        before_cut = t["records"] if t["append_records"] else remaining  # data records before the cut
        while remaining:
            force_txn = self.keep_open and not self.open_txns and remaining <= t["batch_records"][1]
            draw = self.rng.random()
            if force_txn or draw < t["transactional_fraction"]:
                producer = self.rng.choice(txn)
            elif draw < t["transactional_fraction"] + t["idempotent_fraction"]:
                producer = self.rng.choice(idempotent)
            else:
                producer = plain
            state = self.open_txns.get(producer.producer_id)
            if state is not None and state.batches_left == 0:
                self._end_txn(producer)
                continue
            n = min(self.rng.randint(*t["batch_records"]), remaining, before_cut if before_cut > 0 else remaining)
            self._data_batch(producer, n)
            remaining -= n
            before_cut -= n
            if before_cut == 0 and remaining and self.cut is None:
                self.cut = len(self.encoded)
        self._end_all(txn)

    def _end_all(self, producers: list[_Producer]) -> None:
        """Close every transaction, except the latest one when one must stay open."""
        keep = max(self.open_txns, key=lambda pid: self.open_txns[pid].first_offset) if self.keep_open else None
        for producer in producers:
            if producer.producer_id in self.open_txns and producer.producer_id != keep:
                self._end_txn(producer)

    def _epoch(self, producer: _Producer) -> int:
        return self.epochs.get(producer.producer_id, producer.epoch)

    def _maybe_bump_epoch(self, producer: _Producer) -> bool:
        """With ``epoch_bump_ratio``, the producer's epoch moves on (its sequence restarts at 0);
        no random draw when the ratio is 0, so older specs give the same bytes."""
        ratio = self.topic["epoch_bump_ratio"]
        if not ratio or self.rng.random() >= ratio:
            return False
        self.epochs[producer.producer_id] = self._epoch(producer) + 1
        self.sequences[producer.producer_id] = 0
        return True

    def _data_batch(self, producer: _Producer, n: int) -> None:
        progress.made(n)
        t = self.topic
        pid = producer.producer_id
        if producer.transactional:
            state = self.open_txns.get(pid)
            if state is None:
                state = self.open_txns[pid] = _OpenTxn(self.offset, self.rng.randint(*t["txn_batches"]))
            state.batches_left -= 1
        elif pid >= 0:
            self._maybe_bump_epoch(producer)  # an idempotent producer re-initialised (KIP-360)
        records = [self._record(pid, producer.transactional) for _ in range(n)]
        codec = codecs.BY_NAME[self.rng.choices(list(t["codecs"]), weights=list(t["codecs"].values()))[0]]
        sequence = self.sequences.get(pid, 0) if pid >= 0 else -1
        if pid >= 0:
            self.sequences[pid] = (sequence + n) % (_INT32_MAX + 1)
        self._append(records, codec, producer, self._epoch(producer), sequence)

    def _end_txn(self, producer: _Producer) -> None:
        kind = ABORT if self.rng.random() < self.topic["abort_ratio"] else COMMIT
        # the coordinator may end the transaction with a bumped epoch (a timeout, or a
        # transaction version that bumps at every end): the marker carries the new epoch
        self._maybe_bump_epoch(producer)
        state = self.open_txns.pop(producer.producer_id)
        marker = WrittenRecord(
            self.offset, self._timestamp(self.offset), control_key(kind), control_value(COORDINATOR_EPOCH),
            (), producer.producer_id, True, kind,
        )
        self.offset += 1
        aborted = None
        if kind == ABORT:
            stable = min((o.first_offset for o in self.open_txns.values()), default=marker.offset + 1)
            aborted = AbortedTxn(producer.producer_id, state.first_offset, marker.offset, stable)
        self._append([marker], codecs.NONE, producer, self._epoch(producer), -1, aborted)

    def _append(
        self, records: list[WrittenRecord], codec: int, producer: _Producer, epoch: int, sequence: int,
        aborted: AbortedTxn | None = None,
    ) -> None:
        control = records[0].control is not None
        if self.topic["leader_change_ratio"] and self.rng.random() < self.topic["leader_change_ratio"]:
            self.leader_epoch += 1  # a new leader appends from here on
        self.leader_epochs.setdefault(self.leader_epoch, records[0].offset)
        max_timestamp = max(r.timestamp for r in records)
        stamp = {}
        if self.topic["log_append_time"]:  # the broker stamps the batch: every record reads as its append time
            max_timestamp += LOG_APPEND_DELAY_MS
            stamp = {"timestamp_type": LOG_APPEND_TIME, "max_timestamp": max_timestamp}
        data = encode_batch(
            [Record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records],
            base_offset=records[0].offset, codec=codec, producer_id=producer.producer_id,
            producer_epoch=epoch, base_sequence=sequence, partition_leader_epoch=self.leader_epoch,
            transactional=producer.transactional, control=control, **stamp,
        )
        batch = WrittenBatch(
            records[0].offset, records[-1].offset, codec, producer.producer_id, epoch, sequence,
            producer.transactional, control, max_timestamp, len(data),
        )
        if stamp:
            records = [dataclasses.replace(r, timestamp=max_timestamp) for r in records]
        if self.keep_records:
            self.records.extend(records)
        self.encoded.append(_Encoded(data, batch, aborted, max_timestamp))

    def _legacy(self) -> None:
        """Old brokers' messages first: magic 0, then magic 1; an uncompressed message is an
        entry of its own, compressed ones go in wrappers (CreateTime; magic 0 has no timestamp)."""
        spec = self.topic["legacy"]
        names = list(spec["codecs"])
        for magic, count in ((0, spec["magic0"]), (1, spec["magic1"])):
            while count:
                codec = codecs.BY_NAME[self.rng.choices(names, weights=list(spec["codecs"].values()))[0]]
                n = 1 if codec == codecs.NONE else min(self.rng.randint(*spec["wrapper_records"]), count)
                records = [self._legacy_record(magic) for _ in range(n)]
                if codec == codecs.NONE:
                    r = records[0]
                    message = legacy.encode_message(magic, 0, r.timestamp, r.key, r.value)
                    data = legacy.encode_entry(r.offset, message)
                else:
                    data = legacy.encode_wrapper(magic, codec, CREATE_TIME,
                                                 [Record(r.offset, r.timestamp, r.key, r.value) for r in records])
                batch = WrittenBatch(records[0].offset, records[-1].offset, codec, -1, -1, -1, False, False,
                                     max(r.timestamp for r in records), len(data), magic)
                if self.keep_records:
                    self.records.extend(records)
                self.encoded.append(_Encoded(data, batch, None, self._timestamp(records[-1].offset)))
                count -= n

    def _legacy_record(self, magic: int) -> WrittenRecord:
        key = None if self.rng.random() < self.topic["keyless_fraction"] else self._key()
        value = None if key is not None and self.rng.random() < self.topic["tombstone_fraction"] else self._value()
        ts = self._timestamp(self.offset) if magic == 1 else NO_TIMESTAMP
        record = WrittenRecord(self.offset, ts, key, value, (), -1, False, None)
        self.offset += 1
        return record

    def _record(self, producer_id: int, transactional: bool) -> WrittenRecord:
        t = self.topic
        key = None if self.rng.random() < t["keyless_fraction"] else self._key()
        value = None if key is not None and self.rng.random() < t["tombstone_fraction"] else self._value()
        headers = tuple((f"h{i}", self._letters(self.rng.randint(1, 12))) for i in range(t["headers"]))
        timestamp = self._timestamp(self.offset)
        if t["timestamp_jitter_ms"]:  # producers' clocks disagree: timestamps go back and forth
            timestamp = max(0, timestamp + self.rng.randint(-t["timestamp_jitter_ms"], t["timestamp_jitter_ms"]))
        record = WrittenRecord(self.offset, timestamp, key, value, headers, producer_id, transactional, None)
        self.offset += 1
        return record

    def _timestamp(self, offset: int) -> int:
        """Records' times step with their offsets; those appended after the cut come
        ``append_gap_ms`` later (the time that passed between the cleaning rounds)."""
        gap = self.topic["append_gap_ms"] if self.cut is not None else 0
        return self.topic["timestamp_start_ms"] + offset * self.topic["timestamp_step_ms"] + gap

    def _key(self) -> bytes:
        if self._key_cdf:
            k = bisect.bisect_left(self._key_cdf, self.rng.random() * self._key_cdf[-1])
            k = min(k, len(self._key_cdf) - 1)
        else:
            k = self.rng.randrange(self.topic["keys"])
        key = b"key-%d" % k
        size = self.topic["key_size"]
        if isinstance(size, list):  # each key keeps one size, chosen by its number
            size = self._key_sizes.setdefault(k, random.Random(f"key-size:{k}").randint(*size))
        return key if size is None else key[:size].ljust(size, b".")

    def _value(self) -> bytes:
        """Word salad: compressible like real payloads, unlike random bytes."""
        size = self.rng.randint(*self.topic["value_size"])
        draw, count = self.rng.getrandbits, len(_WORDS)
        words, length = [], 0
        while length < size:
            i = draw(_WORD_BITS)
            while i >= count:
                i = draw(_WORD_BITS)
            words.append(_WORDS[i])
            length += _WORD_ROOM[i]
        return " ".join(words).encode()[:size]

    def _letters(self, n: int) -> bytes:
        return "".join(self.rng.choices(_LETTERS, k=n)).encode()


def _produce(topic: dict[str, Any], partition: int, seed: int, keep_records: bool = True) -> _PartitionProducer:
    producer = _PartitionProducer(topic, random.Random(f"{seed}:{topic['name']}:{partition}"),
                                  keep_open=topic["open_transaction"] and partition == 0, keep_records=keep_records)
    producer.run()
    progress.flush()
    return producer

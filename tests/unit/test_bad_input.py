"""Bad bytes, end to end: for each defect the readers name the file, the byte position and
what is wrong; the valid batches before it are still yielded; ``dump`` prints them and
then the error; ``verify`` lists it; the CLI exits non-zero without a traceback (``verify``
exits 0 only on what an interrupted append leaves at the end of the active segment: a broker's
recovery truncates it, so it is a note, 1 with ``--strict``).

Every expected position and message is derived from the bytes built here (kafka-python
batches, struct, crc32c), not from the code under test."""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c
import pytest

from kcompact import errors
from kcompact.errors import FormatError
from kcompact.jobs import cli
from kcompact.readers import checkpoint
from kcompact.readers.records import Record
from kcompact.readers.segment import iter_batches
from kcompact.tools.dump import dump_path
from kcompact.tools.verify import verify_log_dir
from tests.support import TS0, hand_v2_batch, hand_varint, kp_build, make_batches, recompute_crc32c, write_partition

B0, B1, B2 = make_batches(0, 3)  # offsets 0..4, 5..9, 10..14
CODEC_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def patched(batch: bytes, at: int, fmt: str, value: int, crc: bool = False) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(fmt, buf, at, value)
    return bytes(recompute_crc32c(buf) if crc else buf)


def crc_flipped() -> tuple[bytes, str]:
    bad = bytearray(B1)
    bad[40] ^= 0xFF  # a maxTimestamp byte: inside the CRC's range, outside record framing
    stored, computed = struct.unpack_from(">I", bad, 17)[0], crc32c.crc32c(bytes(bad[21:]))
    return bytes(bad), f"CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"


def length_mismatch_batch() -> bytes:
    """Offset 5, one record whose length varint claims one byte more than its fields use."""
    body = b"\x00" + hand_varint(0) + hand_varint(0) + hand_varint(1) + b"k" + hand_varint(1) + b"v" + hand_varint(0)
    section = hand_varint(len(body) + 1) + body + b"\x00"
    return hand_v2_batch(section, base_offset=5, count=1, last_offset_delta=0, first_timestamp=TS0, max_timestamp=TS0)


def truncated_payload(codec: int) -> bytes:
    """Offset 5, compressed by kafka-python, then 6 bytes cut off the compressed data with
    length and CRC fixed: only the payload is wrong."""
    records = [Record(o, TS0 + o, b"k%d" % o, b"compressible value " * 20) for o in range(5, 10)]
    buf = bytearray(kp_build(records, codec=codec, base_offset=5)[:-6])
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    return bytes(recompute_crc32c(buf))


@dataclass(frozen=True)
class LogCase:
    """A .log whose first ``valid`` entries are sound; the next has the defect, at ``position``.

    ``level``: ``framing`` stops iteration, ``batch`` is a CRC/codec fault in intact framing
    (strict iteration raises, lenient yields it), ``records`` only shows when records are decoded.
    ``torn``: what a crash mid-append leaves (the file is the partition's only, so active, segment):
    ``verify`` notes it."""

    data: bytes
    valid: int
    position: int
    what: str
    level: str
    torn: bool = False


def _cases() -> dict[str, LogCase]:
    p1, p2, p3 = len(B0), len(B0) + len(B1), len(B0) + len(B1) + len(B2)
    crc_bad, crc_what = crc_flipped()
    cases = {
        "torn tail": LogCase(
            B0 + B1 + B2[:30], 2, p2, f"torn batch: entry at offset 10 needs {len(B2)} bytes, the file ends after 30",
            "framing", torn=True),
        "torn header": LogCase(
            B0 + B1 + B2[:10], 2, p2, "torn tail: 10 bytes left, fewer than an entry header", "framing", torn=True),
        "crc mismatch": LogCase(B0 + crc_bad + B2, 1, p1, f"batch at offset 5: {crc_what}", "batch"),
        "length past end of file": LogCase(
            B0 + B1 + patched(B2, 8, ">i", 1_000_000), 2, p2,
            f"torn batch: entry at offset 10 needs 1000012 bytes, the file ends after {len(B2)}", "framing", torn=True),
        "unknown magic": LogCase(
            B0 + patched(B1, 16, ">b", 7) + B2, 1, p1, f"unknown magic 7 (entry at offset 5, length {len(B1) - 12})",
            "framing"),
        "garbage": LogCase(
            B0 + B1 + b"\x13\x37" * 20, 2, p2,
            f"unknown magic 19 (entry at offset {0x1337133713371337}, length {0x13371337})", "framing"),
        "zero-filled tail": LogCase(
            B0 + B1 + B2 + bytes(4096), 3, p3, "zero-filled bytes start here (a preallocated or torn tail)", "framing",
            torn=True),
        "record length mismatch": LogCase(
            B0 + length_mismatch_batch() + B2, 1, p1 + 61,
            "batch at offset 5: record length field does not match the record's fields", "records"),
    }
    for codec in (5, 6, 7):
        cases[f"unknown codec {codec}"] = LogCase(
            B0 + patched(B1, 21, ">h", codec, crc=True) + B2, 1, p1,
            f"batch at offset 5: unknown compression codec {codec} for magic 2", "batch")
    for codec, name in CODEC_NAMES.items():
        cases[f"corrupt {name} payload"] = LogCase(
            B0 + truncated_payload(codec) + B2, 1, p1, f"batch at offset 5: {name}", "records")
    return cases


CASES = _cases()


@pytest.fixture(params=sorted(CASES))
def case(request) -> LogCase:
    return CASES[request.param]


@pytest.fixture
def log_file(tmp_path: Path, case: LogCase) -> Path:
    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    path = part / f"{0:020d}.log"
    path.write_bytes(case.data)
    return path


def read_until_error(data: bytes, path: str) -> tuple[list, FormatError]:
    """Strict reading as a consumer does it: every batch, and its records; small chunks."""
    read = []
    with pytest.raises(FormatError) as err:
        for batch in iter_batches(io.BytesIO(data), path, chunk_size=64):
            batch.records()
            read.append(batch)
    return read, err.value


def test_readers_name_file_position_and_what(case: LogCase, log_file: Path):
    path = str(log_file)
    read, err = read_until_error(case.data, path)
    assert (err.path, err.position) == (path, case.position)
    assert err.what.startswith(case.what), err.what
    assert [b.position for b in read] == [0, len(B0), len(B0) + len(B1)][: case.valid]


def test_lenient_reading_passes_batch_faults(case: LogCase, log_file: Path):
    """Without ``strict`` a CRC or codec fault is yielded with its framing intact, so the
    batches after it are read too; framing faults still end the iteration."""
    found = []
    try:
        found.extend(iter_batches(io.BytesIO(case.data), str(log_file), strict=False))
    except FormatError as exc:
        assert case.level == "framing" and exc.position == case.position
    expected = case.valid if case.level == "framing" else 3
    assert len(found) == expected


def test_dump_prints_valid_part_then_error(case: LogCase, log_file: Path):
    out = io.StringIO()
    assert dump_path(str(log_file), print_data=True, as_json=False, out=out) == 1
    lines = out.getvalue().splitlines()
    error = f"Error: {log_file}: byte {case.position}: {case.what}"
    (at,) = [i for i, line in enumerate(lines) if line.startswith(error)]
    batch_lines = [line for line in lines[:at] if line.startswith("baseOffset: ")]
    shown = case.valid if case.level == "framing" else case.valid + 1  # a sound-framed bad batch is shown too
    assert [line.split()[1] for line in batch_lines] == ["0", "5", "10"][:shown]
    assert sum(line.startswith("| offset: ") for line in lines[:at]) == 5 * case.valid


def test_dump_json_reports_the_error(case: LogCase, log_file: Path):
    out = io.StringIO()
    assert dump_path(str(log_file), print_data=True, as_json=True, out=out) == 1
    objects = [json.loads(line) for line in out.getvalue().splitlines()]
    errors = [o for o in objects if o["type"] == "error"]
    assert errors[0]["file"] == str(log_file) and errors[0]["position"] == case.position
    assert errors[0]["error"].startswith(case.what)


def test_verify_lists_it(case: LogCase, log_file: Path):
    found = [(p.path, p.position, p.what) for p in verify_log_dir(str(log_file.parent.parent))]
    assert any(
        (path, pos) == (str(log_file), case.position) and what.startswith(case.what) for path, pos, what in found
    ), found


def test_cli_exits_non_zero_without_traceback(case: LogCase, log_file: Path, capsys):
    logs = str(log_file.parent.parent)
    assert cli.main(["verify", logs]) == (errors.EXIT_OK if case.torn else errors.EXIT_PROBLEMS)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{'note: ' if case.torn else ''}{log_file}: byte {case.position}: {case.what}")
    assert cli.main(["verify", "--strict", logs]) == errors.EXIT_PROBLEMS
    assert cli.main(["dump", "--print-data", str(log_file)]) == errors.EXIT_PROBLEMS
    assert "Traceback" not in capsys.readouterr().err


# -- files other than .log ------------------------------------------------------------------
@pytest.mark.parametrize("text, position, what", [
    (b"1\n0\n", 0, "unsupported checkpoint version '1' (expected 0)"),
    (b"0\n2\nt 0 5\n", 2, "entry count 2 does not match the 1 entry lines"),
    (b"0\n1\nt x 5\n", 4, "line 3 't x 5' has a non-numeric partition or offset"),
    (b"0\n1\nt 5\n", 4, "line 3 't 5' is not 'topic partition offset'"),
])
def test_malformed_checkpoint(tmp_path: Path, text: bytes, position: int, what: str, capsys):
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_bytes(text)
    with pytest.raises(FormatError) as err:
        checkpoint.parse(str(path), text)
    assert err.value.position == position and err.value.what.startswith(what)
    (found,) = verify_log_dir(str(tmp_path))
    assert str(found).startswith(f"{path}: byte {position}: {what}")
    assert cli.main(["verify", str(tmp_path)]) == errors.EXIT_PROBLEMS


@pytest.mark.parametrize("name", ["123.log", "foo.log"])
def test_misnamed_segment_file(tmp_path: Path, name: str, capsys):
    part = tmp_path / "t-0"
    part.mkdir()
    (part / f"{0:020d}.log").write_bytes(B0)
    (part / name).write_bytes(B1)
    problem = f"{part / name}: not a Kafka segment file name"
    assert [str(p) for p in verify_log_dir(str(tmp_path))] == [problem]
    out = io.StringIO()
    assert dump_path(str(part), print_data=False, as_json=False, out=out) == 1
    assert f"Error: {problem}" in out.getvalue().splitlines()
    assert "baseOffset: 0 " in out.getvalue()  # the well-named segment is still dumped
    assert cli.main(["verify", str(tmp_path)]) == errors.EXIT_PROBLEMS
    assert cli.main(["dump", str(part)]) == errors.EXIT_PROBLEMS


def test_dumping_a_file_without_a_base_offset_in_its_name(tmp_path: Path, capsys):
    path = tmp_path / "foo.log"
    path.write_bytes(B0)
    out = io.StringIO()
    assert dump_path(str(path), print_data=False, as_json=False, out=out) == 1
    assert out.getvalue().splitlines() == [
        f"Dumping {path}",
        f"Error: {path}: file name does not start with a base offset",
    ]


def test_empty_segment_that_is_not_active(tmp_path: Path, capsys):
    """Not a fault (Kafka's cleaner leaves one when a whole group loses every batch): verify
    accepts it, dump names it."""
    part = write_partition(tmp_path / "t-0", [(0, [B0, B1]), (10, []), (10 + 1, make_batches(11, 1))])
    empty = part / f"{10:020d}.log"
    assert verify_log_dir(str(tmp_path)) == []
    assert cli.main(["verify", str(tmp_path)]) == errors.EXIT_OK
    out = io.StringIO()
    assert dump_path(str(empty), print_data=False, as_json=False, out=out) == 0
    assert f"{empty} is empty." in out.getvalue()

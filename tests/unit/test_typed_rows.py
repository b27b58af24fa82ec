"""Typed rows (``contracts.typed_rows``): one dataclass gives the Arrow schema and the driver's
records; checked against schemas and tables written out by hand with pyarrow."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass

import pyarrow as pa
import pytest

from kcompact.compaction.cleaning.partition_batches import PartitionBatches
from kcompact.compaction.cleaning.results import GroupResult
from kcompact.contracts.plan_row import PlanRow
from kcompact.contracts.typed_rows import TypedRow, column, mapping, nested


@dataclass(frozen=True, slots=True)
class Inner(TypedRow):
    a: int = column(pa.int64())
    b: str | None = column(pa.string())


@dataclass(frozen=True, slots=True)
class Outer(TypedRow):
    name: str = column(pa.string())
    small: int | None = column(pa.int32())
    ratio: float = column(pa.float64(), 0.5)
    tags: tuple[str, ...] = column(pa.list_(pa.string()))
    settings: dict[str, str] | None = mapping()
    one: Inner | None = nested(Inner)
    many: tuple[Inner, ...] = nested(Inner, many=True)


INNER = pa.struct([("a", pa.int64()), ("b", pa.string())])
OUTER = pa.schema([("name", pa.string()), ("small", pa.int32()), ("ratio", pa.float64()),
                   ("tags", pa.list_(pa.string())), ("settings", pa.map_(pa.string(), pa.string())),
                   ("one", INNER), ("many", pa.list_(INNER))])
ROWS = [
    {"name": "x", "small": 7, "ratio": 0.25, "tags": ["p", "q"], "settings": [("k", "v"), ("k2", "v2")],
     "one": {"a": 1, "b": None}, "many": [{"a": 2, "b": "two"}, {"a": 3, "b": "three"}]},
    {"name": "y", "small": None, "ratio": 1.0, "tags": [], "settings": None, "one": None, "many": []},
]


def test_the_schema_is_the_fields_in_order():
    assert Outer.schema().equals(OUTER)
    assert Inner.struct() == INNER


def test_records_read_from_a_table_by_attribute():
    x, y = Outer.read(pa.Table.from_pylist(ROWS, schema=OUTER))
    assert x == Outer("x", 7, 0.25, ("p", "q"), {"k": "v", "k2": "v2"}, Inner(1), (Inner(2, "two"), Inner(3, "three")))
    assert (y.small, y.settings, y.one, y.many, y.tags) == (None, None, None, (), ())
    with pytest.raises(FrozenInstanceError):
        x.name = "z"
    assert x.but(name="z").name == "z" and x.name == "x"


def test_a_table_of_records_is_the_table_they_were_read_from():
    table = pa.Table.from_pylist(ROWS, schema=OUTER)
    assert Outer.table(Outer.read(table)).equals(table)
    assert pa.Table.from_batches([Outer.batch(Outer.read(table))]).equals(table)


def test_sparks_names_for_nested_fields_are_read_and_kept():
    """Spark's toArrow names a list's item ``element``; a table written back keeps the shape given."""
    spark_like = pa.schema([f if not pa.types.is_list(f.type) else
                            pa.field(f.name, pa.list_(pa.field("element", f.type.value_type))) for f in OUTER])
    table = pa.Table.from_pylist(ROWS, schema=spark_like)
    records = Outer.read(table)
    assert records == Outer.read(pa.Table.from_pylist(ROWS, schema=OUTER))
    assert Outer.table(records, spark_like).schema.equals(spark_like)


def test_missing_columns_take_defaults_and_unknown_names_are_refused():
    assert Outer.of({"name": "n"}) == Outer("n", None, 0.5, (), None, None, ())
    with pytest.raises(TypeError, match="Outer has no field colour"):
        Outer.of({"name": "n", "colour": "red"})
    table = pa.Table.from_pylist(ROWS, schema=OUTER)
    (x, _) = Outer.read(table, ["name", "tags"])
    assert (x.name, x.tags, x.small, x.many) == ("x", ("p", "q"), None, ())


def test_a_field_not_declared_with_its_arrow_type_is_refused():
    @dataclass(frozen=True, slots=True)
    class Loose(TypedRow):
        n: int = 0

    with pytest.raises(TypeError, match=r"Loose.n is not declared"):
        Loose.schema()


def test_the_stages_rows_have_the_columns_the_stages_exchange():
    """The plan's columns a plan file from this version holds, and those of stage 1's and the
    segment groups' rows."""
    assert PlanRow.schema().names[:8] == ["topic", "partition", "log_dir", "path", "cleanup_policy", "state",
                                          "log_start_offset", "log_end_offset"]
    assert PlanRow.schema().field("segments").type.value_type.names == [
        "base_offset", "size", "mtime_ms", "largest_timestamp", "first_batch_timestamp"]
    assert PlanRow.schema().field("lease_holder").type.names == ["owner", "host", "pid", "until"]
    assert PartitionBatches.schema().field("batches").type == pa.binary()
    assert GroupResult.schema().names == ["gid", "path", "group", "base_offset", "size", "batches", "records", "files",
                                          "seconds", "error", "codes", "failure", "inexact_snappy"]

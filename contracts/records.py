"""Typed records for the rows that pass between stages: one frozen dataclass per kind of row, whose
fields carry their Arrow types, gives both the record the driver reads by attribute and the Arrow
schema (``Record.schema``) of the tables and Spark DataFrames the stages exchange. A field read by a
wrong name fails where it is read; a column added to the schema is a field added to the record.

A field is declared with ``column`` (a scalar or a list of scalars), ``nested`` (another record,
or a list of them) or ``mapping`` (Arrow's map of strings, a dict here)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Self

import pyarrow as pa

_ARROW = "arrow"
_RECORD = "record"  # a nested record's class
_MANY = "many"  # a list of nested records
_MAP = "map"


def column(arrow: pa.DataType, default: Any = None) -> Any:
    """A field of Arrow type ``arrow`` (a list's default is the empty tuple)."""
    if pa.types.is_list(arrow):
        return dataclasses.field(default=(), metadata={_ARROW: arrow})
    return dataclasses.field(default=default, metadata={_ARROW: arrow})


def nested(record: type[Record], many: bool = False) -> Any:
    """A field holding one ``record`` (None by default), or with ``many`` a tuple of them."""
    arrow = record.struct()
    if many:
        return dataclasses.field(default=(), metadata={_ARROW: pa.list_(arrow), _RECORD: record, _MANY: True})
    return dataclasses.field(default=None, metadata={_ARROW: arrow, _RECORD: record})


def mapping() -> Any:
    """A field holding Arrow's map of strings to strings: a dict, or None."""
    return dataclasses.field(default=None, metadata={_ARROW: pa.map_(pa.string(), pa.string()), _MAP: True})


class Record:
    """The base of a typed row: subclasses are ``@dataclass(frozen=True, slots=True)`` with every field
    declared by ``column``, ``nested`` or ``mapping``."""

    __slots__ = ()

    @classmethod
    def schema(cls) -> pa.Schema:
        """The Arrow schema of a table of these records, in field order."""
        found = cls.__dict__.get("_schema_cache")
        if found is None:
            found = pa.schema([pa.field(f.name, _arrow(cls, f)) for f in dataclasses.fields(cls)])
            type.__setattr__(cls, "_schema_cache", found)
        return found

    @classmethod
    def struct(cls) -> pa.StructType:
        """The Arrow struct of one record, as a nested field holds it."""
        return pa.struct(list(cls.schema()))

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Self:
        """A record from ``row`` (a dict by column name, as ``pa.Table.to_pylist`` gives it); a
        column the row lacks takes the field's default, a name the record lacks is refused."""
        unknown = set(row) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
        values = {}
        for f in dataclasses.fields(cls):
            if f.name in row:
                values[f.name] = _typed(f, row[f.name])
        return cls(**values)

    @classmethod
    def read(cls, table: pa.Table, columns: Iterable[str] | None = None) -> list[Self]:
        """The records of ``table``, in its order, columns by name (Spark's own names for nested list
        and map fields too); ``columns``: only these are read, the other fields keep their defaults
        (for a view that needs a few columns of a large table)."""
        wanted = set(columns) if columns is not None else None
        names = [f.name for f in dataclasses.fields(cls)
                 if f.name in table.column_names and (wanted is None or f.name in wanted)]
        return [cls.of(row) for row in table.select(names).to_pylist()]

    @classmethod
    def table(cls, records: Iterable[Record], schema: pa.Schema | None = None) -> pa.Table:
        """``records`` as a table of ``schema`` (default: this record's own)."""
        return pa.Table.from_pylist([r.row() for r in records], schema=schema or cls.schema())

    @classmethod
    def batch(cls, records: Iterable[Record]) -> pa.RecordBatch:
        """``records`` as one record batch of this record's schema (what a Spark task yields)."""
        return pa.RecordBatch.from_pylist([r.row() for r in records], schema=cls.schema())

    def row(self) -> dict[str, Any]:
        """This record as a dict by column name, nested records as dicts (what Arrow builds from)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def but(self, **changes: Any) -> Self:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)


def _arrow(cls: type, f: dataclasses.Field) -> pa.DataType:
    if _ARROW not in f.metadata:
        raise TypeError(f"{cls.__name__}.{f.name} is not declared by column(), nested() or mapping()")
    return f.metadata[_ARROW]


def _typed(f: dataclasses.Field, value: Any) -> Any:
    if value is None:
        return () if pa.types.is_list(f.metadata[_ARROW]) else None
    record = f.metadata.get(_RECORD)
    if record is not None:
        if f.metadata.get(_MANY):
            return tuple(v if isinstance(v, record) else record.of(v) for v in value)
        return value if isinstance(value, record) else record.of(value)
    if f.metadata.get(_MAP):
        return dict(value)
    if pa.types.is_list(f.metadata[_ARROW]):
        return tuple(value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.row()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value

"""The rows that pass between stages, typed: one frozen dataclass per kind of row, whose
fields carry their Arrow types, gives both the record the driver reads by attribute and the Arrow
schema (``TypedRow.schema``) of the tables and Spark DataFrames the stages exchange. A field read by a
wrong name fails where it is read; a column added to the schema is a field added to the record.

A field is declared with ``column`` (a scalar or a list of scalars), ``nested`` (another record,
or a list of them) or ``mapping`` (Arrow's map of strings, a dict here)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
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


def nested(record: type[TypedRow], many: bool = False) -> Any:
    """A field holding one ``record`` (None by default), or with ``many`` a tuple of them."""
    arrow = record.struct()
    if many:
        return dataclasses.field(default=(), metadata={_ARROW: pa.list_(arrow), _RECORD: record, _MANY: True})
    return dataclasses.field(default=None, metadata={_ARROW: arrow, _RECORD: record})


def mapping() -> Any:
    """A field holding Arrow's map of strings to strings: a dict, or None."""
    return dataclasses.field(default=None, metadata={_ARROW: pa.map_(pa.string(), pa.string()), _MAP: True})


class TypedRow:
    """The base of a typed row: subclasses are ``@dataclass(frozen=True, slots=True)`` with every field
    declared by ``column``, ``nested`` or ``mapping``."""

    __slots__ = ()

    @classmethod
    def schema(cls) -> pa.Schema:
        """The Arrow schema of a table of these records, in field order."""
        return _layout(cls).schema

    @classmethod
    def struct(cls) -> pa.StructType:
        """The Arrow struct of one record, as a nested field holds it."""
        return pa.struct(list(cls.schema()))

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Self:
        """A record from ``row`` (a dict by column name, as ``pa.Table.to_pylist`` gives it); a
        column the row lacks takes the field's default, a name the record lacks is refused."""
        layout = _layout(cls)
        if not layout.names.issuperset(row):
            unknown = set(row) - layout.names
            raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
        readers = layout.readers
        return cls(**{name: value if (typed := readers[name]) is None else typed(value) for name, value in row.items()})

    @classmethod
    def read(cls, table: pa.Table, columns: Iterable[str] | None = None) -> list[Self]:
        """The records of ``table``, in its order, columns by name (Spark's own names for nested list
        and map fields too); ``columns``: only these are read, the other fields keep their defaults
        (for a view that needs a few columns of a large table)."""
        wanted = set(columns) if columns is not None else None
        names = [name for name in _layout(cls).schema.names
                 if name in table.column_names and (wanted is None or name in wanted)]
        return [cls.of(row) for row in table.select(names).to_pylist()]

    @classmethod
    def table(cls, records: Iterable[TypedRow], schema: pa.Schema | None = None) -> pa.Table:
        """``records`` as a table of ``schema`` (default: this record's own)."""
        return pa.Table.from_pylist([r.row() for r in records], schema=schema or cls.schema())

    @classmethod
    def batch(cls, records: Iterable[TypedRow]) -> pa.RecordBatch:
        """``records`` as one record batch of this record's schema (what a Spark task yields)."""
        return pa.RecordBatch.from_pylist([r.row() for r in records], schema=cls.schema())

    def row(self) -> dict[str, Any]:
        """This record as a dict by column name, nested records as dicts (what Arrow builds from)."""
        return {name: getattr(self, name) if plain is None else plain(getattr(self, name))
                for name, plain in _layout(type(self)).writers}

    def but(self, **changes: Any) -> Self:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True, slots=True)
class _Layout:
    """What a record class's fields need, worked out once per class: its schema, its field names,
    and per field how Arrow's Python value becomes the field's (``readers``) and back (``writers``;
    None: as it is)."""

    schema: pa.Schema
    names: frozenset[str]
    readers: dict[str, Callable[[Any], Any] | None]
    writers: tuple[tuple[str, Callable[[Any], Any] | None], ...]


def _layout(cls: type) -> _Layout:
    found = cls.__dict__.get("_layout_cache")
    if found is None:
        fields = dataclasses.fields(cls)
        readers, writers = {}, []
        for f in fields:
            if _ARROW not in f.metadata:
                raise TypeError(f"{cls.__name__}.{f.name} is not declared by column(), nested() or mapping()")
            readers[f.name], plain = _converters(f.metadata)
            writers.append((f.name, plain))
        found = _Layout(pa.schema([pa.field(f.name, f.metadata[_ARROW]) for f in fields]),
                        frozenset(readers), readers, tuple(writers))
        type.__setattr__(cls, "_layout_cache", found)
    return found


def _converters(meta: Mapping[str, Any]) -> tuple[Callable[[Any], Any] | None, Callable[[Any], Any] | None]:
    """How one field's value is read from Arrow's Python value (a null list: the empty tuple), and
    written back (tuples as lists, nested records as dicts)."""
    record = meta.get(_RECORD)
    if record is not None and meta.get(_MANY):
        return ((lambda v: () if v is None else tuple(x if isinstance(x, record) else record.of(x) for x in v)),
                lambda v: [x.row() for x in v])
    if record is not None:
        return ((lambda v: v if v is None or isinstance(v, record) else record.of(v)),
                lambda v: None if v is None else v.row())
    if meta.get(_MAP):
        return (lambda v: None if v is None else dict(v)), None
    if pa.types.is_list(meta[_ARROW]):
        return (lambda v: () if v is None else tuple(v)), list
    return None, None

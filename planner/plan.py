"""A plan, as the planner makes it and the compaction job takes it: one type from ``planner.plan``
(or ``planner.output.read``) to ``compaction.pipeline.job.run``, a notebook's DataFrame on request."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import pyarrow as pa

from kcompact.contracts.plan_row import PlanRow

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class Plan:
    """Kafka's cleaning decision (and what retention deletes) for every partition of some log dirs:
    one row per partition (``contracts.plan_row.PlanRow``), in rank order then by name, held on the
    driver. The compaction job cleans its selected rows (``compaction.pipeline.to_clean``)."""

    table: pa.Table

    @cached_property
    def rows(self) -> tuple[PlanRow, ...]:
        """The rows as typed records, in the table's order."""
        return tuple(PlanRow.read(self.table))

    @property
    def selected(self) -> list[PlanRow]:
        """The rows the compaction job cleans, in rank order."""
        return [row for row in self.rows if row.selected]

    @property
    def log_dirs(self) -> list[str]:
        """The log dirs of the plan's partitions, sorted: those a compaction of it works on (a log
        dir in which the planner found no partition has no row)."""
        return sorted(set(self.table.column("log_dir").to_pylist()))

    def within(self, log_dirs: list[str]) -> Plan:
        """The plan of the partitions in ``log_dirs`` alone."""
        import pyarrow.compute as pc

        return Plan(self.table.filter(pc.is_in(self.table.column("log_dir"), value_set=pa.array(log_dirs,
                                                                                                 pa.string()))))

    def renamed(self, names: dict[str, str]) -> Plan:
        """The plan with each log dir ``old`` of ``names`` called ``names[old]``, in its rows' log
        dir and partition paths: a plan written under one name of a directory, run under another."""
        if all(old == new for old, new in names.items()):
            return self
        log_dirs = self.table.column("log_dir").to_pylist()
        def moved(log_dir: str, path: str | None) -> str | None:  # a partition dir is a child of its log dir
            if path is None or log_dir not in names:
                return path
            return posixpath.join(names[log_dir], posixpath.basename(path.rstrip("/"))) + path[len(path.rstrip("/")):]

        paths = [moved(d, path) for d, path in zip(log_dirs, self.table.column("path").to_pylist(), strict=True)]
        table = self.table
        for column, values in (("log_dir", [names.get(d, d) for d in log_dirs]), ("path", paths)):
            at = table.schema.get_field_index(column)
            table = table.set_column(at, table.schema.field(at), pa.array(values, pa.string()))
        return Plan(table)

    def df(self, spark: SparkSession) -> DataFrame:
        """The plan as a Spark DataFrame (for a notebook: ``.filter("selected").show()``)."""
        return spark.createDataFrame(self.table)

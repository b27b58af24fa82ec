"""A picture of a plan: how dirty the compacted partitions are, and which ones matter most.

Left, the distribution of cleanable ratios with each min.cleanable.dirty.ratio
in force drawn as a line (Kafka cleans what lies right of it); right, the
partitions with the most cleanable bytes. Figures are built without pyplot so
that nothing depends on a display or on global state, and the PNG goes through
``storage`` so an ``s3://`` path works like a local one.
"""

from __future__ import annotations

import io
from collections import Counter

import pyarrow as pa
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from kcompact import storage
from kcompact.conf.policy import is_compacted
from kcompact.conf.units import MB
from kcompact.contracts.plan_row import PlanRow
from kcompact.planner.plan import Plan
from kcompact.planner.rules import ratio_text

FIGSIZE = (14.0, 6.5)  # inches
DPI = 100  # so the PNG is FIGSIZE * DPI pixels
TOP = 20
BINS = [i / 20 for i in range(21)]  # 0.05-wide bins over [0, 1]
SELECTED, SKIPPED = "#2b8a3e", "#adb5bd"
THRESHOLDS = (("#c92a2a", "--"), ("#1864ab", ":"), ("#e67700", "-."), ("#862e9c", (0, (5, 2, 1, 2))))
_LABEL_CHARS = 32
COLUMNS = ["topic", "partition", "cleanup_policy", "cleanable_ratio", "cleanable_bytes", "min_cleanable_ratio",
           "selected", "rank"]


def plot_plan(plan: Plan, path: str) -> None:
    """Write the plan's picture as a PNG to ``path`` (local or ``s3://``)."""
    out = io.BytesIO()
    draw(plan.table).savefig(out, format="png", dpi=DPI)
    storage.write_durable(path, out.getvalue())


def show_plan(plan: Plan) -> Figure:
    """The plan's picture for a notebook, which displays the returned Figure."""
    return draw(plan.table)


def draw(table: pa.Table) -> Figure:
    """The two panels side by side (or why there is nothing to draw) under a one-line summary."""
    every = PlanRow.read(table, COLUMNS)  # not the segment lists: they are most of a plan's bytes
    rows = [r for r in every if _compacted(r)]
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, width_ratios=(1, 1.15))
    fig.suptitle(_summary(len(every), rows), fontsize=13)
    if rows:
        _ratios(left, rows)
        _top_bytes(right, rows)
    else:
        _nothing(fig, f"Nothing to draw: {_why_nothing(every)}.")
    return fig


def _compacted(row: PlanRow) -> bool:
    """Partitions the rules ran on: compacted, readable, with segments (they have a ratio)."""
    return row.cleanable_ratio is not None and row.compacted


def _why_nothing(every: list[PlanRow]) -> str:
    if not every:
        return "the plan is empty"
    if any(is_compacted(r.cleanup_policy) for r in every):
        return "no compacted partition has a cleanable ratio (all are empty or unreadable)"
    return "no partition has cleanup.policy=compact"


def _summary(partitions: int, rows: list[PlanRow]) -> str:
    selected = [r for r in rows if r.selected]
    mb = sum(r.cleanable_bytes for r in selected) / MB
    return (f"Cleaning plan: {partitions:,} partitions, {len(rows):,} compacted, "
            f"{len(selected):,} selected ({mb:,.1f} MB to clean)")


def _ratios(ax, rows: list[PlanRow]) -> None:
    """Stacked histogram (selected over skipped) with a line per ratio threshold in force."""
    chosen = [r.cleanable_ratio for r in rows if r.selected]
    passed = [r.cleanable_ratio for r in rows if not r.selected]
    ax.hist([passed, chosen], bins=BINS, stacked=True, color=[SKIPPED, SELECTED],
            label=[f"skipped ({_partitions(len(passed))})", f"selected ({_partitions(len(chosen))})"],
            edgecolor="white")
    users = Counter(r.min_cleanable_ratio for r in rows if r.min_cleanable_ratio is not None)
    for i, threshold in enumerate(sorted(users)):
        color, style = THRESHOLDS[i % len(THRESHOLDS)]
        ax.axvline(threshold, color=color, linestyle=style, linewidth=1.8,
                   label=f"min.cleanable.dirty.ratio = {threshold:g} ({_partitions(users[threshold])})")
    ax.set_xlim(0, 1)
    ax.set_title("Cleanable ratio of compacted partitions")
    ax.set_xlabel("cleanable ratio (dirty bytes / total bytes)")
    ax.set_ylabel("partitions")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, ax.get_ylim()[1] * 1.35)  # headroom so the legend covers no bar
    ax.legend(loc="upper center", fontsize=9)


def _partitions(n: int) -> str:
    return f"{n:,} partition" + ("" if n == 1 else "s")


def _top_bytes(ax, rows: list[PlanRow]) -> None:
    """The largest cleanable byte counts, biggest on top, selected ones coloured and ranked."""
    top = sorted(rows, key=lambda r: (-r.cleanable_bytes, r.topic or "", r.partition or 0))[:TOP]
    top.reverse()  # barh draws the first row at the bottom
    sizes = [r.cleanable_bytes / MB for r in top]
    ax.barh(range(len(top)), sizes, color=[SELECTED if r.selected else SKIPPED for r in top])
    ax.set_yticks(range(len(top)), [short_label(r.name) for r in top], fontsize=9)
    for i, (row, size) in enumerate(zip(top, sizes)):
        note = f" #{row.rank} selected" if row.selected else " skipped"
        ax.text(
            size,
            i,
            f" {_mb(size)} MB, ratio {ratio_text(row.cleanable_ratio, row.min_cleanable_ratio)},{note}",
            va="center",
            fontsize=8,
        )
    ax.set_xlim(0, max(sizes, default=0) * 1.6 or 1)  # room for the notes right of the bars
    ax.set_title(f"Top {len(top)} partitions by cleanable bytes (green: selected)")
    ax.set_xlabel("cleanable bytes (MB = 2^20 bytes)")


def _mb(size: float) -> str:
    """Two decimals, or three significant digits below 1 MB so small partitions do not all read 0.00."""
    return f"{size:,.2f}" if size >= 1 else f"{size:.3g}"


def short_label(name: str) -> str:
    """A name for an axis (a partition's ``topic-partition``, a stage, a rule), shortened in the
    middle: a topic name may have 249 characters, and a label wider than the figure collapses
    matplotlib's layout (its "constrained_layout not applied" warning)."""
    if len(name) <= _LABEL_CHARS:
        return name
    half = (_LABEL_CHARS - 1) // 2
    return f"{name[:half]}…{name[-half:]}"


def _nothing(fig: Figure, text: str) -> None:
    for ax in fig.axes:
        ax.set_axis_off()
    fig.text(0.5, 0.5, text, ha="center", va="center", fontsize=14)

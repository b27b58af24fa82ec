"""``kcompact plan --plot``: a valid PNG of a fixed size, whatever the plan holds.

Plans are built by hand on ``PLAN_SCHEMA`` (no Spark); PIL, an independent PNG
reader, checks the file.
"""

from __future__ import annotations

import io

import pyarrow as pa
import pytest
from PIL import Image

from kcompact.planner.build import PLAN_SCHEMA
from kcompact.planner.plan import Plan
from kcompact.planner.plot import DPI, FIGSIZE, plot_plan, short_label, show_plan

SIZE = (round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def row(partition: int, ratio: float | None, dirty: int | None, *, topic: str = "orders",
        policy: str = "compact", selected: bool = False, rank: int | None = None, min_ratio: float = 0.5) -> dict:
    skip = (
        None if selected else ("below ratio" if ratio is not None else "not compacted (cleanup.policy has no compact)")
    )
    return {"topic": topic, "partition": partition, "log_dir": "/logs", "path": f"/logs/{topic}-{partition}",
            "cleanup_policy": policy, "state": "idle", "cleanable_ratio": ratio, "cleanable_bytes": dirty,
            "min_cleanable_ratio": min_ratio, "selected": selected, "rank": rank, "skip_reason": skip}


def normal_plan() -> Plan:
    rows = [row(p, p / 30, p * 150_000, selected=p / 30 > 0.5, rank=30 - p if p > 15 else None) for p in range(30)]
    rows.append(row(0, 0.9, 9_000_000, topic="a-topic-with-a-name-far-longer-than-any-label-should-be",
                    selected=True, rank=1, min_ratio=0.2))
    rows.append(row(0, None, None, topic="clicks", policy="delete"))
    return Plan(pa.Table.from_pylist(rows, schema=PLAN_SCHEMA))


def not_compacted_plan() -> Plan:
    return Plan(pa.Table.from_pylist([row(p, None, None, topic="clicks", policy="delete") for p in range(3)],
                                     schema=PLAN_SCHEMA))


@pytest.mark.parametrize("plan", [normal_plan(), Plan(PLAN_SCHEMA.empty_table()), not_compacted_plan()],
                         ids=["normal", "empty", "no-compacted"])
def test_plot_writes_a_png_of_the_expected_size(tmp_path, plan):
    out = tmp_path / "plan.png"
    plot_plan(plan, str(out))
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC
    with Image.open(io.BytesIO(data)) as image:
        image.verify()  # checks the chunks' CRCs
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG"
        assert image.size == SIZE


def test_plot_writes_to_s3(s3_endpoint):
    import fsspec

    fs = fsspec.filesystem("s3")
    fs.mkdir("plots")
    plot_plan(normal_plan(), "s3://plots/plan.png")
    with Image.open(io.BytesIO(fs.cat_file("plots/plan.png"))) as image:
        assert image.size == SIZE


def test_show_plan_draws_the_same_panels():
    fig = show_plan(normal_plan())
    left, right = fig.axes
    assert [line.get_xdata()[0] for line in left.get_lines()] == [0.2, 0.5]  # one line per threshold
    labels = [t.get_text() for t in right.get_yticklabels()]
    assert len(labels) == 20
    assert labels[-1].startswith("a-topic-with") and "…" in labels[-1]  # the largest on top, shortened
    assert "31 compacted" in fig.get_suptitle()  # the delete-only partition is not counted


def test_show_plan_says_why_there_is_nothing_to_draw():
    fig = show_plan(not_compacted_plan())
    assert any("no partition has cleanup.policy=compact" in t.get_text() for t in fig.texts)


def test_a_skipped_ratio_never_reads_as_its_threshold():
    """Kafka cleans when ratio > min.cleanable.dirty.ratio: 0.499 shown as "0.50, skipped" (or 0.4996
    as "0.500") reads as a partition at the threshold; the labels keep the digits that tell them apart."""
    from kcompact.planner.output import describe

    table = pa.Table.from_pylist([row(0, 0.499, 200_000), row(1, 0.4996, 100_000),
                                  row(2, 0.9, 50_000, selected=True, rank=1)], schema=PLAN_SCHEMA)
    labels = [t.get_text() for t in show_plan(Plan(table)).axes[1].texts]
    assert any("ratio 0.499, skipped" in t for t in labels), labels
    assert any("ratio 0.4996, skipped" in t for t in labels), labels
    assert any("ratio 0.900, #1 selected" in t for t in labels), labels
    lines = describe(Plan(table).rows).splitlines()
    ratios = [tokens[tokens.index(name) + 1] for tokens in (line.split() for line in lines)
              for name in tokens if name.startswith("orders-")]
    assert sorted(ratios) == ["0.499", "0.4996", "0.900"]


def test_the_longest_topic_names_keep_the_layout(tmp_path, recwarn):
    """A topic name may have 249 characters (Kafka's limit); labels that long collapsed the
    report's constrained layout ("constrained_layout not applied" on stderr, issue 43)."""
    from kcompact.compaction.reports import report_html

    topic = "streams-app-KSTREAM-AGGREGATE-STATE-STORE-" + "x" * 190 + "-changelog"
    parts = [{"topic": topic, "partition": i, "path": f"/logs/{topic}-{i}", "error": None, "skipped": None,
              "bytes_read": (i + 1) << 20, "bytes_written": 1 << 18, "removed": {"older": 10 * i}}
             for i in range(4)]
    report_html._bytes_plot(parts)
    report_html._removed_plot(parts)
    assert not [w for w in recwarn if "constrained_layout" in str(w.message)], [str(w.message) for w in recwarn]
    assert len(short_label(f"{topic}-3")) <= 32 and short_label(f"{topic}-3").endswith("changelog-3")


def test_long_stage_and_rule_names_keep_the_layout(recwarn):
    """The report's JSON may come from another version or be merged by a scheduler: every axis
    label is shortened, stages and retention rules as well as partitions."""
    from kcompact.compaction.reports import report_html

    name = "recover, then retention of every partition of " + "x" * 80
    report_html._stages_plot({name + "-1": 1.5, name + "-2": 0.5})
    report_html._retention_plots([{"topic": "orders", "partition": 0, "path": "/logs/orders-0", "bytes_deleted": 1,
                                   "reasons": {name: 2}}])
    assert not [w for w in recwarn if "constrained_layout" in str(w.message)], [str(w.message) for w in recwarn]

"""Every job's report as one self-contained HTML page: tables and plots, nothing fetched.

``render(doc)`` takes a report's JSON document (``compaction.reports.report.Report.to_json()``,
``operations.retention.RetentionReport.to_json()``, ``kcompact.NightlyReport.to_json()`` or
``operations.recover.RecoveryReport.to_json()``), so the page shows exactly the numbers the JSON
file holds. It leads with what an operator needs first, the command's ``outcome``
(``compaction.reports.outcome``: the exit code, a one-line verdict, what failed, is held back,
paused or uncleanable, each with what to do) in a block coloured for success or failure; then the
plots (an empty one is not drawn: a sentence says so); then the tables, each of a few columns on
one subject. Every table cell carries the place of its
value in that document as a JSON pointer (``data-path``) and the value itself as JSON
(``data-value``); the cell's text shows integers and strings as they are, decimals rounded to
3 places, booleans as yes/no, null as a dash, lists and objects as JSON. Plots are matplotlib
PNGs inlined as base64 ``data:`` URIs (built without pyplot, so no display or global state is
involved); the CSS is inline; nothing on the page points outside it.
"""

from __future__ import annotations

import base64
import io
import json
import posixpath
from dataclasses import dataclass, field

import jinja2
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kcompact import storage
from kcompact.compaction.reports.report import METRICS, REASONS
from kcompact.conf.units import MB
from kcompact.operations.states import utc
from kcompact.planner.plot import short_label

TOP = 40  # partitions drawn in a per-partition plot: the largest ones
# Partitions listed in a page's per-partition tables: failed and skipped ones first, then the
# largest, so the page's size and its rendering stay flat however many partitions a run had (the
# JSON holds every row).
SHOWN = 500
DPI = 100
REASON_COLOURS = dict(zip(REASONS, ("#1864ab", "#c92a2a", "#e67700", "#868e96", "#862e9c")))
RULE = ("Every number is the report's JSON value: integers as they are, decimals rounded to 3 places "
        "(the exact value is in each cell's data-value, its place in the JSON in data-path).")

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ title }}</title>
<style>
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 1.5em 2em; color: #212529; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; border-bottom: 2px solid #dee2e6; padding-bottom: 0.2em; margin-top: 1.6em; }
p.rule, p.when { color: #495057; margin: 0.3em 0; }
.scroll { overflow-x: auto; margin: 0.8em 0 1.2em; }
table { border-collapse: collapse; font-size: 0.8em; max-width: 100%; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
th, td { border: 1px solid #dee2e6; padding: 0.2em 0.4em; vertical-align: top; }
thead th { white-space: nowrap; word-break: normal; background: #e9ecef; position: sticky; top: 0; }
tbody th { background: #f8f9fa; text-align: left; font-weight: normal; }
tbody tr:nth-child(even) td { background: #f8f9fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.text { max-width: 40em; overflow-wrap: anywhere; }
figure { display: inline-block; margin: 0.5em 1.5em 0.5em 0; }
figure img { max-width: 100%; border: 1px solid #dee2e6; }
figcaption { font-size: 0.85em; color: #495057; }
dl { font-size: 0.85em; } dt { font-weight: bold; margin-top: 0.4em; } dd { margin-left: 1.5em; }
section.outcome { padding: 0.2em 1em 0.6em; border-left: 8px solid; }
section.outcome h2 { border-bottom: none; margin-top: 0.4em; }
section.outcome.ok { background: #ebfbee; border-color: #2b8a3e; }
section.outcome.failed { background: #fff0f0; border-color: #c92a2a; }
section.outcome .scroll { margin: 0.4em 0; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
{% macro table(t) %}
<div class="scroll"><table id="{{ t.id }}">
<caption>{{ t.caption }}</caption>
<thead><tr>{% for h in t.headers %}<th scope="col">{{ h }}</th>{% endfor %}</tr></thead>
<tbody>
{% for row in t.rows %}<tr>{% if row.label is not none %}<th scope="row">{{ row.label }}</th>{% endif %}
{%- for c in row.cells %}<td class="{{ c.kind }}" data-path="{{ c.path }}" data-value="{{ c.value }}">{{ c.text }}</td>{% endfor %}</tr>
{% endfor %}
</tbody></table></div>
{% endmacro %}
{% if outcome %}
<section id="outcome" class="outcome {{ outcome.colour }}">
<h2>{{ outcome.verdict }}</h2>
{% for t in outcome.tables %}{{ table(t) }}{% endfor %}
</section>
{% endif %}
{% if figures or empty %}
<section id="plots">
<h2>Plots</h2>
{% for p in empty %}<p class="when">{{ p }}</p>
{% endfor %}
{% for f in figures %}<figure><img data-plot="{{ f.name }}" alt="{{ f.caption }}" src="data:image/png;base64,{{ f.png }}">
<figcaption>{{ f.caption }}</figcaption></figure>
{% endfor %}
</section>
{% endif %}
<p class="rule">{{ rule }}</p>
{% for s in sections %}
<section id="{{ s.id }}">
<h2>{{ s.title }}</h2>
{% for p in s.paragraphs %}<p class="when">{{ p }}</p>
{% endfor %}
{% for t in s.tables %}{{ table(t) }}{% endfor %}
{% if s.notes %}<dl>{% for term, text in s.notes %}<dt>{{ term }}</dt><dd>{{ text }}</dd>{% endfor %}</dl>{% endif %}
</section>
{% endfor %}
</body>
</html>
"""
_TEMPLATE = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(TEMPLATE)


# -- the page's parts --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Cell:
    text: str
    path: str  # JSON pointer (RFC 6901) into the report's document
    value: str  # the value, as JSON
    kind: str  # "num" or "text": how it is aligned


@dataclass(slots=True)
class Row:
    label: str | None
    cells: list[Cell]


@dataclass(slots=True)
class Table:
    id: str
    caption: str
    headers: list[str]
    rows: list[Row] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Plot:
    name: str
    caption: str
    png: str  # base64


@dataclass(slots=True)
class Section:
    id: str
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Plot] = field(default_factory=list)  # drawn below the outcome, before every section's tables
    empty: list[str] = field(default_factory=list)  # why a plot of the section is not drawn: nothing to draw
    notes: list[tuple[str, str]] = field(default_factory=list)

    def plots(self, *made: Plot | str) -> None:
        """Keep each plot ``made``, or the sentence saying why one has nothing to draw."""
        for m in made:
            (self.figures if isinstance(m, Plot) else self.empty).append(m)


@dataclass(slots=True)
class Outcome:
    verdict: str
    colour: str  # "ok" (exit 0) or "failed"
    tables: list[Table]


class Doc:
    """A report document (or one of its sections, under ``prefix``) that hands out cells."""

    def __init__(self, root: dict, prefix: tuple = ()):
        self.root, self.prefix = root, prefix
        self.data = root
        for part in prefix:
            self.data = self.data[part]

    def sub(self, *parts) -> Doc:
        return Doc(self.root, self.prefix + parts)

    def cell(self, *parts) -> Cell:
        value = self.data
        for part in parts:
            value = value[part]
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        return Cell(show(value), pointer(self.prefix + parts), json.dumps(value), "num" if numeric else "text")


def pointer(parts: tuple) -> str:
    """The RFC 6901 JSON pointer of a path of keys and list indexes."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def show(value) -> str:
    """A JSON value as a cell shows it (the rule the page states)."""
    if value is None:
        return "\u2014"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, int | str):
        return str(value)
    return json.dumps(value)


def _key_values(doc: Doc, id: str, caption: str, keys: list[tuple], strip: int = 0) -> Table:
    """A two-column table: each key path's label (less its first ``strip`` keys), then its value."""
    return Table(id, caption, ["", "value"], [Row(".".join(map(str, k[strip:])), [doc.cell(*k)]) for k in keys])


# -- plots -------------------------------------------------------------------------------------
def _figure(rows: int = 0) -> tuple[Figure, object]:
    fig = Figure(figsize=(8.0, max(2.6, 1.2 + 0.28 * rows)), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _png(name: str, caption: str, fig: Figure) -> Plot:
    out = io.BytesIO()
    fig.savefig(out, format="png", metadata={"Software": None})  # no URL in the file either
    return Plot(name, caption, base64.b64encode(out.getvalue()).decode("ascii"))


def _largest(parts: list[dict], key) -> list[dict]:
    """At most TOP partitions, the largest by ``key``, drawn largest at the top."""
    return sorted(parts, key=key, reverse=True)[:TOP][::-1]


def shown(parts: list[dict], size: str) -> list[int]:
    """Indexes of the partitions a table lists, in the document's order: at most ``SHOWN``, those
    with an error or skipped first, then the largest by ``size``."""
    if len(parts) <= SHOWN:
        return list(range(len(parts)))
    ranked = sorted(range(len(parts)), key=lambda i: (not (parts[i]["error"] or parts[i]["skipped"]),
                                                      -parts[i][size]))
    return sorted(ranked[:SHOWN])


def _shown_line(parts: list[dict], listed: list[int], what: str) -> list[str]:
    """What the page says when its tables list only some of the partitions."""
    if len(listed) == len(parts):
        return []
    return [f"The tables below list {len(listed):,} of the {len(parts):,} partitions: those that failed or were "
            f"skipped, then the largest by {what}. The JSON report holds every partition."]


def _name(p: dict) -> str:
    return f"{p['topic']}-{p['partition']}" if p.get("topic") is not None else posixpath.basename(p["path"])


def _bytes_plot(parts: list[dict]) -> Plot | str:
    done = _largest([p for p in parts if not p["error"] and not p["skipped"]], lambda p: p["bytes_read"])
    if not done:
        return "No plot of bytes before and after: no partition was cleaned."
    fig, ax = _figure(2 * len(done))
    y = range(len(done))
    ax.barh([i + 0.2 for i in y], [p["bytes_read"] / MB for p in done], 0.4, label="before (bytes read)",
            color="#adb5bd")
    ax.barh([i - 0.2 for i in y], [p["bytes_written"] / MB for p in done], 0.4, label="after (bytes written)",
            color="#2b8a3e")
    ax.set_yticks(list(y), [short_label(_name(p)) for p in done])
    ax.set_xlabel("MB (2^20 bytes)")
    fig.legend(loc="outside right upper")
    return _png("bytes", f"Bytes before and after, per partition ({TOP} largest at most)", fig)


def _removed_plot(parts: list[dict]) -> Plot | str:
    done = _largest([p for p in parts if not p["error"] and not p["skipped"]],
                    lambda p: sum(p["removed"].values()))
    if not any(sum(p["removed"].values()) for p in done):
        return "No plot of records removed: no record was removed."
    fig, ax = _figure(len(done))
    left = [0] * len(done)
    for reason in REASONS:
        counts = [p["removed"].get(reason, 0) for p in done]
        ax.barh(range(len(done)), counts, left=left, label=reason, color=REASON_COLOURS[reason])
        left = [a + b for a, b in zip(left, counts)]
    ax.set_yticks(range(len(done)), [short_label(_name(p)) for p in done])
    ax.set_xlabel("records removed")
    fig.legend(loc="outside right upper")
    return _png("removed", f"Records removed by reason, per partition ({TOP} most at most)", fig)


def _stages_plot(stages: dict[str, float]) -> Plot | str:
    if not stages:
        return "No plot of stage timings: no stage ran."
    fig, ax = _figure(len(stages))
    names = list(stages)[::-1]
    ax.barh(range(len(names)), [stages[n] for n in names], color="#1864ab")
    ax.set_yticks(range(len(names)), [short_label(n) for n in names])
    ax.set_xlabel("seconds (wall)")
    return _png("stages", "Stage timings, back to back", fig)


def _retention_plots(parts: list[dict]) -> list[Plot | str]:
    """Bytes deleted per partition and segments deleted per rule, or (none due) one sentence."""
    due = _largest([p for p in parts if p["bytes_deleted"]], lambda p: p["bytes_deleted"])
    rules: dict[str, int] = {}
    for p in parts:
        for rule, n in p["reasons"].items():
            rules[rule] = rules.get(rule, 0) + n
    if not rules:
        return ["No plots of retention: no segment was due for deletion."]
    out: list[Plot | str] = ["No plot of bytes deleted: the segments due hold no bytes."]
    if due:
        fig, ax = _figure(len(due))
        ax.barh(range(len(due)), [p["bytes_deleted"] / MB for p in due], color="#c92a2a")
        ax.set_yticks(range(len(due)), [short_label(_name(p)) for p in due])
        ax.set_xlabel("MB (2^20 bytes)")
        out = [_png("retention-bytes", f"Bytes deleted (due, in a dry run), per partition ({TOP} largest at most)",
                    fig)]
    fig, ax = _figure(len(rules))
    ax.barh(range(len(rules)), list(rules.values()), color="#e67700")
    ax.set_yticks(range(len(rules)), [short_label(r) for r in rules])
    ax.set_xlabel("segments")
    return [*out, _png("retention-rules", "Segments deleted (due, in a dry run), by rule", fig)]


# -- sections ----------------------------------------------------------------------------------
def _when(data: dict) -> str:
    """When it ran (the wall clock), where and with what, then the clock its rules used (``now``)."""
    run = data.get("run") or {}
    ran = ""
    if run:
        ran = (f"Ran from {utc(run['started_ms'])} to {utc(run['ended_ms'])} on {run['host']}: kcompact "
               f"{run['version']}, Spark {run['spark_master']} ({run['spark_app_id']}). ")
    clock = f"The rules' clock (now): {utc(data['now'])}"
    return ran + clock + (" (dry run: nothing was written)" if data["dry_run"] else "")


def _run_table(doc: Doc, id: str) -> Table:
    """``now``, ``dry_run`` and where and how the run ran (``run``: a nightly run's sections have it once, at
    the top)."""
    keys = (
        [("now",), ("dry_run",)]
        + [("units",)] * ("units" in doc.data)
        + [("run", k) for k in doc.data.get("run") or {}]
    )
    return _key_values(doc, f"{id}-run", "Run", keys)


def _undone(doc: Doc, s: Section, id: str) -> None:
    """What the run left undone and why: partitions held back until fixed, checkpoints reset, notes."""
    data = doc.data
    blocked = data.get("blocked") or []
    if blocked:
        columns = ("partition", "why", "way_out")
        s.tables.append(Table(f"{id}-blocked", "Not cleaned until fixed", list(columns),
                              [Row(None, [doc.cell("blocked", i, c) for c in columns]) for i in range(len(blocked))]))
    s.notes += [("Kafka release", f"{r['log_dir']}: {r['why']}") for r in data.get("kafka_releases") or []]
    s.notes += [("gzip header", f"{g['log_dir']}: OS byte {g['gzip_os']} ({g['why']})")
                for g in data.get("gzip_headers") or []]
    s.notes += [("cleaner checkpoint reset", text) for text in data.get("checkpoint_resets") or []]
    s.notes += [("note", text) for text in data.get("notes") or []]


# The partitions' columns, a table per subject (each row of the later ones labelled with its partition)
SIZE_COLUMNS = (("topic",), ("partition",), ("dirty_start",), ("dirty_end",), ("bytes_read",), ("bytes_written",),
                ("records_read",), ("records_kept",), ("seconds",), ("mb_per_s",))
REMOVED_COLUMNS = tuple(("removed", r) for r in REASONS)
FATE_COLUMNS = (("committed",), ("failure",), ("error",), ("skipped",), ("path",))


def _partition_tables(doc: Doc, id: str, listed: list[int], subjects: list[tuple[str, str, tuple]]) -> list[Table]:
    """One table per (id suffix, caption, columns) of ``subjects`` over the ``listed`` partitions;
    the first holds their topic and partition, the others name each row with its partition."""
    parts = doc.data["partitions"]
    out = []
    for n, (suffix, caption, columns) in enumerate(subjects):
        headers = [" ".join(c[1:] or c) for c in columns]  # a removed count by its reason alone
        out.append(Table(f"{id}-{suffix}", caption, headers if n == 0 else ["partition", *headers],
                         [Row(None if n == 0 else _name(parts[i]), [doc.cell("partitions", i, *c) for c in columns])
                          for i in listed]))
    return out


def compaction_section(doc: Doc, id: str = "compaction") -> Section:
    data = doc.data
    s = Section(id, "Compaction", [_when(data)])
    s.tables.append(_run_table(doc, id))
    _undone(doc, s, id)
    totals = [("totals", k, *sub) for k, v in data["totals"].items()
              for sub in ([(r,) for r in v] if isinstance(v, dict) else [()])]
    s.tables.append(_key_values(doc, f"{id}-totals", "Totals", totals, strip=1))
    parts = data["partitions"]
    listed = shown(parts, "bytes_read")
    s.paragraphs += _shown_line(parts, listed, "bytes read")
    s.tables += _partition_tables(doc, id, listed, [
        ("partitions", "Partitions: bytes and records read and kept", SIZE_COLUMNS),
        ("removed", "Partitions: records removed, by reason", REMOVED_COLUMNS),
        ("fates", "Partitions: what became of each", FATE_COLUMNS)])
    group_columns = ("base_offset", "segments", "outcome")
    s.tables.append(Table(f"{id}-groups", "Segment groups (each becomes one cleaned segment)",
                          ["topic", "partition", *group_columns],
                          [Row(None, [doc.cell("partitions", i, "topic"), doc.cell("partitions", i, "partition")]
                               + [doc.cell("partitions", i, "groups", j, c) for c in group_columns])
                           for i in listed for j in range(len(parts[i]["groups"]))]))
    reset_columns = ("log_dir", "topic", "partition", "from", "offset", "why")
    s.tables.append(Table(f"{id}-checkpoint-resets", "Cleaner checkpoint entries outside their log, reset to "
                          "the log start", list(reset_columns),
                          [Row(None, [doc.cell("checkpoint_resets", i, c) for c in reset_columns])
                           for i in range(len(data["checkpoint_resets"]))]))
    s.tables.append(Table(f"{id}-stages", "Stages (wall seconds)", ["stage", "seconds"],
                          [Row(name, [doc.cell("stages", name)]) for name in data["stages"]]))
    rows = []
    for name, value in data["metrics"].items():
        if isinstance(value, dict) and value:  # per log dir
            rows += [Row(f"{name} {log_dir}", [doc.cell("metrics", name, log_dir)]) for log_dir in value]
        else:
            rows.append(Row(name, [doc.cell("metrics", name)]))
    s.tables.append(Table(f"{id}-metrics", "Kafka's cleaner metrics", ["metric", "value"], rows))
    notes = data["metric_notes"]
    s.notes += [(name, METRICS[name] + (f". Note: {notes[name]}" if name in notes else "")) for name in data["metrics"]]
    s.plots(_bytes_plot(data["partitions"]), _removed_plot(data["partitions"]), _stages_plot(data["stages"]))
    return s


def retention_section(doc: Doc, id: str = "retention") -> Section:
    data = doc.data
    s = Section(id, "Retention", [_when(data)])
    s.tables.append(_run_table(doc, id))
    s.tables.append(_key_values(doc, f"{id}-totals", "Totals", [("totals", k) for k in data["totals"]], strip=1))
    parts = data["partitions"]
    listed = shown(parts, "bytes_deleted")
    s.paragraphs += _shown_line(parts, listed, "bytes deleted")
    s.tables += _partition_tables(doc, id, listed, [
        ("partitions", "Partitions: log start and bytes deleted",
         (("topic",), ("partition",), ("log_start",), ("new_log_start",), ("bytes_deleted",), ("deleted",))),
        ("fates", "Partitions: skipped or failed", (("skipped",), ("error",), ("path",)))])
    segment_columns = ("base_offset", "size", "largest_timestamp", "reason")
    s.tables.append(Table(f"{id}-segments", "Segments due for deletion", ["topic", "partition", *segment_columns],
                          [Row(None, [doc.cell("partitions", i, "topic"), doc.cell("partitions", i, "partition")]
                               + [doc.cell("partitions", i, "segments", j, c) for c in segment_columns])
                           for i in listed for j in range(len(parts[i]["segments"]))]))
    s.notes += [("note", note) for note in data["notes"]]
    s.notes += [(f"warning: {_name(p)}", w) for p in data["partitions"] for w in p["warnings"]]
    s.plots(*_retention_plots(data["partitions"]))
    return s


def recovery_section(doc: Doc, id: str = "recovery") -> Section:
    """Whatever the recovery step reports: its counts, then one row per partition it changed."""
    data = doc.data
    s = Section(id, "Recovery")
    scalars = [(k,) for k, v in data.items() if not isinstance(v, list | dict)]
    s.tables.append(_key_values(doc, f"{id}-totals", "Totals", scalars))
    parts = data.get("partitions") or []
    if parts:
        s.tables += _partition_tables(doc, id, list(range(len(parts))), [
            ("partitions", "Partitions recovered or with problems: files", (("path",), ("deleted",), ("renamed",))),
            ("repairs", "Partitions recovered or with problems: repairs",
             (("indexes_rebuilt",), ("truncated",), ("problems",), ("generation",)))])
    else:
        s.paragraphs.append("No partition needed recovery.")
    s.notes += [(f"skipped: {path}", why) for path, why in (data.get("skipped") or {}).items()]
    s.notes += [("removed", path) for path in data.get("temp_files") or []]
    return s


# The outcome's subjects: each one's table caption, and the columns shown (its rows' keys, by header)
CAPTIONS = {"failed": "Failed: why, and what to do", "held_back": "Held back until fixed",
            "held": "Held by another job", "log_dirs": "Log dirs not worked on",
            "uncleanable": "Uncleanable (Kafka's uncleanable partitions: skipped by every job until reset)",
            "paused": "Paused (no job cleans them until resumed)", "skipped": "Skipped by this run"}
OUTCOME_HEADERS = {"step": "step", "partition": "partition", "log_dir": "log dir", "kind": "kind", "why": "why",
                   "way_out": "what to do"}


def outcome_block(doc: Doc) -> Outcome | None:
    """The page's first block: the command's verdict, its exit code and meaning, then a table per
    subject of what it left undone (with a step and a log dir column when its rows name several:
    the way out names the log dir too)."""
    data = doc.data.get("outcome")
    if data is None:  # a report the API wrote, not a command: no exit code
        return None
    o = doc.sub("outcome")
    tables = [Table("outcome-exit", "Exit code", ["exit code", "meaning"], [Row(None, [o.cell("exit_code"),
                                                                                     o.cell("meaning")])])]
    listed = [r for subject in CAPTIONS for r in data[subject]]
    several = {key for key in ("step", "log_dir") if len({r[key] for r in listed}) > 1}
    for subject, caption in CAPTIONS.items():
        rows = data[subject]
        if not rows:
            continue
        columns = [c for c in OUTCOME_HEADERS if c in rows[0] and (c not in ("step", "log_dir") or c in several
                                                                   or subject == "log_dirs")
                   and (c != "partition" or subject != "log_dirs")]
        tables.append(Table(f"outcome-{subject}", caption, [OUTCOME_HEADERS[c] for c in columns],
                            [Row(None, [o.cell(subject, i, c) for c in columns]) for i in range(len(rows))]))
    return Outcome(data["verdict"], "ok" if data["exit_code"] == 0 else "failed", tables)


def sections(doc: dict) -> tuple[str, list[Section]]:
    """The page's title and sections for any of the four report documents."""
    root = Doc(doc)
    if "compaction" in doc and "retention" in doc:
        out = [Section("nightly", "Nightly run", [_when(doc)], [_run_table(root, "nightly")])]
        if doc.get("recovery") is not None:
            out.append(recovery_section(root.sub("recovery")))
        out += [retention_section(root.sub("retention")), compaction_section(root.sub("compaction"))]
        return "kcompact run: recovery, retention, compaction", out
    if "stages" in doc:
        return "kcompact compact", [compaction_section(root)]
    if "checked" in doc:
        return "kcompact recover", [recovery_section(root)]
    return "kcompact retain", [retention_section(root)]


def render(doc: dict) -> str:
    """The page: the outcome, the plots (or why one is not drawn), then every section's tables."""
    title, parts = sections(doc)
    return _TEMPLATE.render(title=title, rule=RULE, sections=parts, outcome=outcome_block(Doc(doc)),
                            figures=[f for s in parts for f in s.figures], empty=[e for s in parts for e in s.empty])


def html_path(json_path: str) -> str:
    """The HTML report's path beside the JSON one: same stem, ``.html``."""
    stem, ext = posixpath.splitext(json_path)
    return f"{stem if ext.lower() == '.json' else json_path}.html"


def write_report(json_path: str, doc: dict, page: bool = True) -> list[str]:
    """Write a job's report ``doc`` as JSON to ``json_path`` (local or ``s3://``) and, with
    ``page``, its HTML page beside it; returns the paths written. The page is made first: should
    that fail, no JSON is left behind to say an outcome the command did not end with."""
    text = render(doc) if page else None
    # unindented: json's compiled encoder takes only that; the pure-Python one grew with the partitions
    storage.write_durable(json_path, json.dumps(doc).encode())
    if text is None:
        return [json_path]
    path = html_path(json_path)
    storage.write_durable(path, text.encode())
    return [json_path, path]

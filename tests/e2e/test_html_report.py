"""The HTML reports as a browser shows them, against the JSON reports written beside them.

Real jobs run through the command line on a generated log dir (``kcompact compact``, with one
corrupt partition of hand-built bytes added: exit 4; then ``kcompact retain --dry-run`` and
``kcompact recover`` of a crashed run's leftover on the cleaned dir, and ``kcompact run`` on a
copy), each with ``--report``; Debian's Chromium, headless, renders each page in
a 1280 x 800 window, the first screen: ``--dump-dom`` gives the DOM it built, ``--screenshot`` a
PNG of that screen, from one run of the unchanged page. Every table cell of the DOM must name the
place of its value in the JSON (a JSON pointer, resolved here by the ``jsonpointer`` library) and
show exactly that value by the page's stated rule; every number of the JSON must be in some cell;
every plot must be an inline PNG that decodes; nothing may point outside the page. Chromium
missing is a failure: CI installs it (``.ci/run``).

The first screen (issue 43 item 6) is judged without a script in the page: the DOM says the
outcome block comes first and holds the exit code, the failed partition's name and what to do,
with no plot before it; the screenshot says that block, painted in the colour the page gives a
failure (or a success), lies wholly inside the first 800 px, rows of other colour below it.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from jsonpointer import JsonPointer, resolve_pointer
from matplotlib import image

from kcompact.jobs.cli import main
from kcompact.tools import generator
from tests.e2e.test_compaction_bad_input import corrupt_partition, recs

CHROMIUM = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
DAY = 86_400_000
NOW = generator.DEFAULT_START_MS + 10 * DAY  # past clicks' and users' retention.ms (7 days): `run` deletes
KAFKA_METRICS = {"max-dirty-percent", "max-clean-time-secs", "max-buffer-utilization-percent",
                 "cleaner-recopy-percent", "max-compaction-delay-secs", "uncleanable-partitions-count",
                 "uncleanable-bytes", "time-since-last-run-ms"}
COMPACTION_PLOTS = {"bytes", "removed", "stages"}
RETENTION_PLOTS = {"retention-bytes", "retention-rules"}
PLOTS = {"compact": COMPACTION_PLOTS, "retain": RETENTION_PLOTS, "run": COMPACTION_PLOTS | RETENTION_PLOTS,
         "recover": set()}
PAGES = list(PLOTS)
SCREEN = (800, 1280)  # the first screen: what a 1280 x 800 window shows before any scrolling
# the outcome block's background (compaction.reports.report_html's CSS), as the screenshot's RGB
FAILED_COLOUR, OK_COLOUR = (0xFF, 0xF0, 0xF0), (0xEB, 0xFB, 0xEE)


# -- the jobs --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reports(spark, tmp_path_factory):
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)"
    root = tmp_path_factory.mktemp("html")
    generator.generate(str(root / "gen"), generator.load_spec(None), seed=11)
    a, b = root / "a", root / "b"
    shutil.copytree(root / "gen", a)
    shutil.copytree(root / "gen", b)
    corrupt_partition(a / "broken-0")  # a CRC broken in a closed segment: marked uncleanable, exit 4
    codes = {
        "compact": main(["compact", str(a), "--now", str(NOW), "--topic-config", "broken:cleanup.policy=compact",
                         "--report", str(root / "compact.json")]),
        "retain": main(["retain", str(a), "--now", str(NOW), "--dry-run", "--report", str(root / "retain.json")]),
        "run": main(["run", str(b), "--now", str(NOW), "--report", str(root / "run.json")]),
    }
    (a / "broken-0" / f"{6:020d}.log.cleaned").write_bytes(recs(6, [b"e"]))  # what a crashed run leaves
    codes["recover"] = main(["recover", str(a), "--report", str(root / "recover.json")])
    return SimpleNamespace(root=root, codes=codes, **{name: page(root, name, code) for name, code in codes.items()})


def page(root: Path, name: str, code: int) -> SimpleNamespace:
    """The page's DOM and first screen, from one run of Chromium on the page as written."""
    html = root / f"{name}.html"
    assert html.exists(), f"no HTML report beside {name}.json (kcompact {name} exited {code})"
    shot = root / f"{name}.png"
    dom = chromium(root / f"profile-{name}", "--hide-scrollbars", f"--window-size={SCREEN[1]},{SCREEN[0]}",
                   f"--screenshot={shot}", "--dump-dom", html.as_uri())
    return SimpleNamespace(doc=json.loads((root / f"{name}.json").read_text()), raw=html.read_text(),
                           dom=Dom.parse(dom), shot=image.imread(shot))


def chromium(profile: Path, *args: str) -> str:
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, encoding="utf-8", timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Dom(HTMLParser):
    """The table cells (attributes, text) and images of a DOM as Chromium serialised it, and the
    order of its sections, images and cells (``order``: (tag, id, data-plot or data-path, section))."""

    def __init__(self):
        super().__init__()
        self.cells: list[tuple[dict, str]] = []
        self.images: list[dict] = []
        self.tables = 0
        self.order: list[tuple[str, str | None]] = []
        self._section: str | None = None
        self._cell: tuple[dict, list[str]] | None = None

    @classmethod
    def parse(cls, text: str) -> Dom:
        dom = cls()
        dom.feed(text)
        dom.close()
        return dom

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self._section = attrs.get("id")
            self.order.append(("section", self._section))
        if tag == "td":
            self._cell = (attrs, [])
        elif tag == "img":
            self.images.append(attrs)
            self.order.append(("img", self._section))
        elif tag == "table":
            self.tables += 1

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append((self._cell[0], "".join(self._cell[1])))
            self.order.append(("td", self._section))
            self._cell = None
        elif tag == "section":
            self._section = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1].append(data)


# -- what every page must satisfy -------------------------------------------------------------
def shows(text: str, value) -> bool:
    """The page's stated rule: integers and strings as they are, decimals to 3 places, booleans
    yes/no, null a dash, lists and objects as JSON."""
    if value is None:
        return text == "\u2014"
    if isinstance(value, bool):
        return text == ("yes" if value else "no")
    if isinstance(value, int):
        return text == text.strip() and int(text) == value
    if isinstance(value, float):
        _, _, places = text.partition(".")
        return len(places) == 3 and abs(float(text) - value) <= 0.0005 + 1e-9
    if isinstance(value, str):
        return text == value
    return json.loads(text) == value


def numbers(value, parts: tuple = ()):
    """(JSON pointer, number) of every number in a JSON document."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from numbers(item, (*parts, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from numbers(item, (*parts, i))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield JsonPointer.from_parts(parts).path, value


def check_cells(p) -> None:
    assert p.dom.tables >= 3 and p.dom.cells
    paths = set()
    for attrs, text in p.dom.cells:
        assert "data-path" in attrs and "data-value" in attrs, f"a cell without its JSON place: {attrs} {text!r}"
        value = resolve_pointer(p.doc, attrs["data-path"])  # raises when the place is not in the JSON
        assert json.loads(attrs["data-value"]) == value, attrs
        assert type(json.loads(attrs["data-value"])) is type(value), attrs
        assert shows(text, value), f"{attrs['data-path']}: shows {text!r} for {value!r}"
        paths.add(attrs["data-path"])
    # every number of the JSON is in a cell, or inside a list/object a cell shows as JSON; a retention
    # partition's segment counts by rule ("reasons") are drawn, their segments listed one by one
    missing = [path for path, _ in numbers(p.doc) if "/reasons/" not in path
               and not any(path == c or path.startswith(c + "/") for c in paths)]
    assert missing == []


def check_self_contained(p) -> None:
    assert "http://" not in p.raw and "https://" not in p.raw
    links = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", p.raw)
    assert all(link.startswith("data:image/png;base64,") for link in links)
    assert "<style>" in p.raw and "<link" not in p.raw and "<script" not in p.raw
    ids = re.findall(r'\bid="([^"]*)"', p.raw)
    assert len(ids) == len(set(ids)), ids


def decoded(src: str) -> np.ndarray:
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix)
    return image.imread(io.BytesIO(base64.b64decode(src[len(prefix):], validate=True)), format="png")


def not_blank(pixels: np.ndarray) -> bool:
    """More than one colour, and more than 1% of the pixels unlike the first one (the background)."""
    flat = pixels.reshape(-1, pixels.shape[-1])
    differs = (np.abs(flat - flat[0]) > 1e-6).any(axis=1)
    return differs.mean() > 0.01


def check_plots(p, expected: set[str]) -> None:
    names = [img.get("data-plot") for img in p.dom.images]
    assert sorted(names) == sorted(expected)
    for img in p.dom.images:
        pixels = decoded(img["src"])
        assert pixels.ndim == 3 and pixels.shape[0] >= 200 and pixels.shape[1] >= 600, img["data-plot"]
        assert not_blank(pixels), img["data-plot"]


def check_rendered(p) -> None:
    assert p.shot.shape[:2] == SCREEN
    assert not_blank(p.shot)


def outcome_cells(p) -> dict[str, str]:
    """The text of each cell of the page's outcome section, by its JSON pointer."""
    sections = [section for tag, section in p.dom.order if tag == "td"]
    return {attrs["data-path"]: text for (attrs, text), section in zip(p.dom.cells, sections) if section == "outcome"}


def bands(shot: np.ndarray, colour: tuple[int, int, int]) -> list[tuple[int, int]]:
    """The runs of screen rows (first, last) with more than 20 pixels of exactly ``colour`` (the
    outcome block's padding, 16 px each side, shows it on every row of the block, tables or not)."""
    rgb = np.rint(shot[..., :3] * 255).astype(int)
    rows = np.flatnonzero((rgb == colour).all(axis=-1).sum(axis=1) > 20)
    runs, start = [], None
    for i, row in enumerate(rows):
        if start is None:
            start = row
        if i + 1 == len(rows) or rows[i + 1] != row + 1:
            runs.append((int(start), int(row)))
            start = None
    return runs


MEASURE = """<script>
window.addEventListener("load", () => {
  const wide = [...document.querySelectorAll("table")]
    .filter(t => t.scrollWidth > t.parentElement.clientWidth + 1 || t.getBoundingClientRect().right > innerWidth)
    .map(t => `${t.id} ${t.scrollWidth}px in ${t.parentElement.clientWidth}px`);
  const lines = th => { const r = document.createRange(); r.selectNodeContents(th);
                        return new Set([...r.getClientRects()].map(c => Math.round(c.top))).size; };
  const wrapped = [...document.querySelectorAll("thead th")].filter(th => lines(th) > 1).map(th => th.textContent);
  const page = document.documentElement.scrollWidth;
  document.body.setAttribute("data-measured", JSON.stringify({wide, wrapped, page, view: innerWidth}));
});
</script>"""


def widths(root: Path, name: str) -> dict:
    """The page laid out by Chromium in a 1280 px wide window: tables wider than their box, column
    headers on more than one line, and the page's width (a test-only copy with a measuring
    script, the page itself has none)."""
    page_file = root / f"{name}.html"
    measured = root / f"{name}-measured.html"
    measured.write_text(page_file.read_text().replace("</body>", MEASURE + "</body>"))
    dom = chromium(root / f"profile-measure-{name}", "--window-size=1280,2000", "--virtual-time-budget=5000",
                   "--dump-dom", measured.as_uri())
    found = re.search(r'data-measured="([^"]*)"', dom)
    assert found, "the measuring script did not run"
    return json.loads(found[1].replace("&quot;", '"'))


# -- the pages -----------------------------------------------------------------------------------
def test_jobs_end_as_expected(reports):
    assert reports.codes == {"compact": 4, "retain": 0, "run": 0, "recover": 0}


@pytest.mark.parametrize("name", PAGES)
def test_page_renders_and_shows_the_json(reports, name):
    p = getattr(reports, name)
    check_self_contained(p)
    check_cells(p)
    check_rendered(p)
    check_plots(p, PLOTS[name])


@pytest.mark.parametrize("name", PAGES)
def test_first_screen_is_the_outcome(reports, name):
    """The report's exit code is the process's; the page's first section is the outcome, holding
    the exit code, with no plot before it; its colour (a failure's or a success's) lies wholly in
    the first screen."""
    p, code = getattr(reports, name), reports.codes[name]
    assert p.doc["outcome"]["exit_code"] == code and next(iter(p.doc)) == "outcome"
    assert p.dom.order[0] == ("section", "outcome") and ("img", "outcome") not in p.dom.order
    assert outcome_cells(p)["/outcome/exit_code"] == str(code)
    colour, other = (OK_COLOUR, FAILED_COLOUR) if code == 0 else (FAILED_COLOUR, OK_COLOUR)
    (band,) = bands(p.shot, colour)
    assert band[0] < 150 and band[1] < SCREEN[0] - 20, band  # begins under the title, ends on the first screen
    assert bands(p.shot, other) == []


def test_first_screen_of_a_corrupt_partition_names_it_and_what_to_do(reports):
    p = reports.compact
    outcome = p.doc["outcome"]
    assert outcome["verdict"].startswith("Exit 4 (partial): 1 partition failed")
    (failed,) = outcome["failed"]
    assert failed["partition"] == "broken-0" and failed["kind"] == "corrupt input"
    assert "CRC mismatch" in failed["why"] and failed["why"].startswith(str(reports.root / "a" / "broken-0"))
    assert failed["way_out"].endswith(f"then 'kcompact reset-uncleanable {reports.root / 'a'} broken-0'")
    cells = outcome_cells(p)
    assert cells["/outcome/failed/0/partition"] == "broken-0"
    assert cells["/outcome/failed/0/way_out"] == failed["way_out"]
    assert f"<h2>{html.escape(outcome['verdict'], quote=False)}</h2>" in p.raw


def test_recovery_page_lists_what_it_recovered(reports):
    doc = reports.recover.doc
    (part,) = doc["partitions"]
    assert part["path"].endswith("/broken-0") and part["deleted"] == [f"{6:020d}.log.cleaned"]
    assert doc["outcome"]["verdict"] == "Exit 0 (done): nothing left undone"


def test_compaction_page_content(reports):
    doc = reports.compact.doc
    cleaned = [p for p in doc["partitions"] if p["committed"]]
    assert cleaned and sum(p["records_read"] - p["records_kept"] for p in cleaned) > 0
    assert set(doc["metrics"]) == KAFKA_METRICS
    assert (
        doc["metrics"]["max-buffer-utilization-percent"] == 0 and doc["metric_notes"]["max-buffer-utilization-percent"]
    )
    # one row per partition in the partitions table: its bytes_read cells, in the JSON's order
    read = [(a["data-path"], json.loads(a["data-value"])) for a, _ in reports.compact.dom.cells
            if re.fullmatch(r"/partitions/\d+/bytes_read", a["data-path"])]
    assert read == [(f"/partitions/{i}/bytes_read", p["bytes_read"]) for i, p in enumerate(doc["partitions"])]


def test_nightly_page_has_every_step(reports):
    doc = reports.run.doc
    assert doc["retention"]["totals"]["segments"] > 0  # NOW is past retention.ms: segments went
    assert doc["compaction"]["totals"]["cleaned"] > 0
    prefixes = {a["data-path"].split("/")[1] for a, _ in reports.run.dom.cells}
    assert {"now", "dry_run", "retention", "compaction"} <= prefixes
    if doc["recovery"] is not None:
        assert "recovery" in prefixes


@pytest.mark.parametrize("name", PAGES)
def test_tables_fit_a_1280_px_window(reports, name):
    measured = widths(reports.root, name)
    assert measured["view"] == 1280
    assert measured["wide"] == [] and measured["wrapped"] == [] and measured["page"] <= 1280, measured


def test_page_says_when_where_and_with_what_it_ran(reports):
    doc = reports.compact.doc
    run = doc["run"]
    assert run["command"] == "compact" and run["arguments"][0] == "compact" and run["log_dirs"] == [run["arguments"][1]]
    assert run["started_ms"] <= run["ended_ms"] and run["spark_master"].startswith("local")
    assert run["spark_app_id"].startswith("local-") and run["host"] and run["version"]
    assert doc["now"] == NOW and abs(run["started_ms"] - NOW) > DAY  # the rules' clock is not the wall clock
    text = html.unescape(re.sub(r"<[^>]+>", "", reports.compact.raw))
    started = datetime.fromtimestamp(run["started_ms"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"Ran from {started} to " in text and f"on {run['host']}: kcompact {run['version']}" in text
    assert "The rules' clock (now): 2024-07-13 09:46:40 UTC" in text


def test_retention_page_lists_every_due_segment(reports):
    doc = reports.retain.doc
    due = [(i, j) for i, p in enumerate(doc["partitions"]) for j in range(len(p["segments"]))]
    shown = {a["data-path"] for a, _ in reports.retain.dom.cells}
    assert all(f"/partitions/{i}/segments/{j}/base_offset" in shown for i, j in due)

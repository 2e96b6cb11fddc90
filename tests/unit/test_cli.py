"""The command line: demo on generated data, inspect of a saved sketch, exit codes."""

import json

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.cli import demo_data, main


def test_demo_runs_and_reports_budget(capsys, tmp_path):
    assert main(["demo", "--n", "3000", "--epsilon", "2.0", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "privacy spent per release (ε): [0.8, 0.6, 0.6]" in out
    assert "noisy count" in out and "median" in out and "density" in out
    saved = sorted(p.name for p in tmp_path.iterdir())
    assert saved == ["histogram.sketch", "moments.sketch", "rff.sketch"]
    sk = dps.Sketch.load(tmp_path / "rff.sketch")
    assert sk.column_names == ["age", "income_k", "hours"]
    assert sk.privacy["loss"] == pytest.approx(0.6)


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
    assert a.shape == (100, 3) and np.array_equal(a, b)
    assert not np.array_equal(a, demo_data(100, seed=4))

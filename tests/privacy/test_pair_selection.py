"""Private choice of 2-way marginals (``release_sketch(..., pair_selection=)``).

The independence score moves by at most 4 when a row is added or removed — for the integers the
code computes, at any size, and the bound is reached; the scores inside the measurement take
every adversarial row; the spanning release spends exactly its budget in every measure, releases
on both neighbours, measures a spanning tree, and its choice follows the data.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import opendp_sketch as dps
from opendp_sketch.selection import SCORE_SENSITIVITY, Forest, independence_score, make_independence_scores

dp.enable_features("contrib", "honest-but-curious")
#: the curator-side planning warning of a tree that is mostly noise (public inputs only): the small
#: test tables are below its threshold; tests that compare neighbours check it is the same for both
pytestmark = pytest.mark.filterwarnings("ignore:pair_selection. at this budget")
PLANNING = "pair_selection: at this budget"

SCHEMA = dps.Schema(
    {"x": (0.0, 1.0), "y": (0.0, 1.0), "z": (0.0, 1.0), "c": dps.Categorical(["a", "b"], null="category")},
    rows=2000,
)
ROWS = {
    "null x": (None, 0.5, 0.5, "a"),
    "nan y": (0.5, math.nan, 0.5, "a"),
    "+inf z": (0.5, 0.5, math.inf, "b"),
    "-1e308 x": (-1e308, 0.5, 0.5, "a"),
    "1e308 y": (0.5, 1e308, 0.5, "b"),
    "bound": (1.0, 0.0, 1.0, "b"),
    "null c": (0.5, 0.5, 0.5, None),
    "unknown c": (0.5, 0.5, 0.5, "zzz"),
}
#: refused on the curator's side (no impute value, or infinite): before anything is built
REFUSED = ("null x", "nan y", "+inf z")


def _frame(extra=None, n: int = 2000, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, n)
    df = pl.DataFrame(
        {
            "x": x,
            "y": np.clip(x + rng.normal(0, 0.02, n), 0, 1),
            "z": rng.uniform(0, 1, n),
            "c": rng.choice(["a", "b"], n),
        }
    )
    if extra is not None:
        df = pl.concat([df, pl.DataFrame([extra], schema=df.schema, orient="row")])
    return df


def _neighbours(N: np.ndarray) -> int:
    """The largest score change over every one-row addition (and so every removal) to ``N``."""
    base = independence_score(N)
    worst = 0
    for cell in np.ndindex(*N.shape):
        M = N.copy()
        M[cell] += 1
        worst = max(worst, abs(independence_score(M) - base))
    return worst


tables = st.tuples(st.integers(1, 5), st.integers(1, 5)).flatmap(
    lambda shape: st.lists(
        st.one_of(st.integers(0, 3), st.integers(0, 400)),
        min_size=shape[0] * shape[1],
        max_size=shape[0] * shape[1],
    ).map(lambda v: np.array(v, dtype=np.int64).reshape(shape))
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(tables)
def test_score_moves_at_most_four_per_row(N):
    assert _neighbours(N) <= SCORE_SENSITIVITY


def test_score_bound_is_reached_and_empty_tables_score_zero():
    """Not vacuous: a heavy cell and a row elsewhere move the score by exactly 4."""
    N = np.array([[178, 1, 0, 1], [1, 1, 0, 0], [1, 1, 0, 1], [0, 1, 0, 0]])
    M = N.copy()
    M[1, 1] += 1
    assert abs(independence_score(M) - independence_score(N)) == 4
    assert independence_score(np.zeros((3, 2), dtype=np.int64)) == 0
    assert independence_score([[1]]) == 0


@pytest.mark.parametrize("scale", [1 << 31, 1 << 36, 1 << 44])
def test_score_is_exact_beyond_int64_products(scale):
    """Above 2^31 rows the score is computed in Python integers: the same bound, no overflow,
    and equal to the int64 result of the same table scaled down where both apply."""
    rng = np.random.default_rng(1)
    N = rng.integers(0, 4, size=(4, 3)) * scale + rng.integers(0, 5, size=(4, 3))
    assert _neighbours(N) <= SCORE_SENSITIVITY
    n = int(N.sum())
    exact = sum(
        abs(n * int(N[a, b]) - int(N[a].sum()) * int(N[:, b].sum())) for a in range(4) for b in range(3)
    )
    assert independence_score(N) == exact // n


@pytest.mark.parametrize("kind", list(ROWS))
def test_scores_inside_the_measurement_take_any_row(kind):
    """The scores run on the schema's encoded rows: a null, NaN, ±inf, ±1e308 or unknown label
    maps to a public value, so they never raise or warn, and move by at most 4 per row."""
    from opendp_sketch.backends.tables import make_table_sum_and_count, table_domain
    from opendp_sketch.plan import schema_blocks

    full, keep = schema_blocks(SCHEMA, epsilon=1.0)
    pairs = [i for i, b in enumerate(full.blocks) if len(b.subset) == 2 and i not in keep]
    cand = full.take(pairs)
    dom = table_domain(SCHEMA)
    counts = make_table_sum_and_count(dom, dp.symmetric_distance(), cand)
    t = make_independence_scores(dom, dp.symmetric_distance(), counts, cand.blocks, range(len(pairs)), {})
    assert t.map(1) == 4.0 and t.map(3) == 12.0
    a, b = _frame(), _frame(extra=ROWS[kind])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sa, sb = np.array(t(a)), np.array(t(b))
    assert len(sa) == len(pairs) and np.max(np.abs(sa - sb)) <= SCORE_SENSITIVITY


@pytest.mark.parametrize(
    "budget, key, limit",
    [
        ({"epsilon": 1.0}, "epsilon", 1.0),
        ({"rho": 0.02}, "rho", 0.02),
        ({"epsilon": 1.0, "delta": 1e-6}, "epsilon", 1.0),
    ],
)
def test_spanning_release_spends_exactly_its_budget_on_a_tree(budget, key, limit):
    sk = dps.release_sketch(_frame(), schema=SCHEMA, pair_selection=0.1, **budget)
    assert limit * (1 - 1e-6) <= sk.privacy[key] <= limit
    if "delta" in budget:
        assert sk.privacy["delta"] <= 1e-6
    chosen = sk.privacy["pair_selection"]["pairs"]
    two_way = [b.subset for m in sk.feature_map.maps for b in m.blocks if len(b.subset) == 2]
    assert sorted(tuple(p) for p in chosen) == sorted(two_way)  # the rule kept none at this size
    forest = Forest(4, two_way)
    assert len(two_way) == 3 and forest.components == 1
    est = dps.M2M(sk, seed=0)
    assert abs(est.mean()[0] - 0.5) < 0.1


def _release_recording(frame: pl.DataFrame) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            out: object = dps.release_sketch(frame, schema=SCHEMA, epsilon=1.0, pair_selection=0.1)
        except ValueError as e:
            out = e
    return out, [str(w.message) for w in seen]


@pytest.mark.parametrize("kind", list(ROWS))
def test_spanning_release_same_kind_of_outcome(kind):
    """Both neighbours release (or the added row is refused on the curator's side), with the
    same warnings: only the planning one, which reads public inputs."""
    a, warned_a = _release_recording(_frame())
    b, warned_b = _release_recording(_frame(extra=ROWS[kind]))
    assert isinstance(a, dps.Sketch) and [w[: len(PLANNING)] for w in warned_a] == [PLANNING]
    if isinstance(b, ValueError):
        assert not isinstance(b, dp.OpenDPException)
        assert kind in REFUSED, (kind, b)
        assert warned_b == []  # refused before the plan is made
        return
    assert isinstance(b, dps.Sketch) and kind not in REFUSED
    assert warned_b == warned_a


def test_the_choice_follows_the_data():
    """x and y move together, z is noise: the tree holds (x, y). At ε = 5 the rule keeps no pair
    of 2 000 rows; each round's noise has scale ≈ 6 against a score gap of thousands of rows, so
    failing has probability far below 1e-4."""
    schema = dps.Schema({c: (0.0, 1.0) for c in "xyz"}, rows=2000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an average cell holds 2 noise std's here: no planning warning
        sk = dps.release_sketch(
            _frame().select("x", "y", "z"), schema=schema, epsilon=5.0, pair_selection=0.5
        )
    assert [0, 1] in sk.privacy["pair_selection"]["pairs"]
    assert sk.privacy["pair_selection"]["columns"][0] == ["x", "y"]


def test_a_tree_of_noise_is_warned_about_before_the_release():
    with pytest.warns(UserWarning, match=r"holds 0\.\d+ noise std's of the schema's 2000 rows"):
        dps.release_sketch(_frame(), schema=SCHEMA, epsilon=1.0, pair_selection=0.1)


def test_a_connected_rule_needs_no_choice():
    """With every pair kept by the rule (no row estimate) nothing is spent on a choice."""
    schema = dps.Schema({"x": (0.0, 1.0), "y": (0.0, 1.0)})
    sk = dps.release_sketch(
        _frame().select("x", "y"), schema=schema, epsilon=1.0, pair_selection=0.1, rows_fraction=0
    )
    assert "pair_selection" not in sk.privacy and sk.privacy["epsilon"] <= 1.0


def test_progress_counts_the_one_pass():
    """The candidates' counts and the release read the table in one pass (adaptive.SharedPass)."""
    calls = []
    dps.release_sketch(
        _frame().lazy(),
        schema=SCHEMA,
        epsilon=1.0,
        pair_selection=0.1,
        progress=lambda d, t: calls.append((d, t)),
    )
    assert calls and calls[-1] == (2000, 2000)


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, "0.1", True, math.nan])
def test_bad_shares_are_refused_before_anything_is_read(bad):
    with pytest.raises(ValueError, match="pair_selection"):
        dps.release_sketch(_frame(), schema=SCHEMA, epsilon=1.0, pair_selection=bad)


def test_pair_selection_needs_the_automatic_map_and_a_schema():
    fm = dps.auto_feature_map(SCHEMA, epsilon=1.0)
    with pytest.raises(ValueError, match="drop feature_map= or pair_selection="):
        dps.release_sketch(_frame(), fm, schema=SCHEMA, epsilon=1.0, pair_selection=0.1)
    X = np.random.default_rng(0).random((50, 2))
    with pytest.raises(ValueError, match="give schema="):
        dps.release_sketch(
            X, dps.Histogram(bounds=(0, 1), bins=4, dim=2), bounds=(0, 1), epsilon=1.0, pair_selection=0.1
        )


def test_fine_bins_with_a_tree():
    """``fine_bins=16`` (questions on a known 16-cell grid) with a chosen tree: 16-bin 1-way
    blocks, the tree's 16 × 16 pairs."""
    sk = dps.release_sketch(_frame(), schema=SCHEMA, epsilon=1.0, pair_selection=0.1, fine_bins=16)
    one, two = ([b.shape for b in m.blocks] for m in sk.feature_map.maps)
    assert one == [(16,), (16,), (16,), (3,)] and len(two) == 3  # c: a, b and the null category
    with pytest.raises(ValueError, match="drop feature_map= or fine_bins="):
        dps.release_sketch(_frame(), dps.auto_feature_map(SCHEMA), schema=SCHEMA, epsilon=1.0, fine_bins=16)


def test_candidates_that_cannot_join_everything_get_as_many_rounds_as_they_can():
    """Four columns, a measured 3-way block (0, 1, 2) and one candidate pair (2, 3) besides
    (0, 3): Kruskal picks exactly one, and never runs a round without a choice."""
    from opendp_sketch.adaptive import make_spanning_sketch
    from opendp_sketch.budget import Budget

    box = ([0.0] * 4, [1.0] * 4)
    fm = dps.MarginalTables(box, [0, 1, 2, 3, (0, 1, 2), (2, 3), (0, 3)], bins=4)
    m, shape, rounds = make_spanning_sketch(
        dps.box_domain(box), dp.symmetric_distance(), Budget.of(epsilon=1.0), 1, fm, measured=[0, 1, 2, 3, 4]
    )
    assert rounds == 1 and m.map(1) <= 1.0
    X = np.random.default_rng(0).random((500, 4))
    for _ in range(5):
        sk = m(X)
        assert sk.privacy["pair_selection"]["pairs"] in ([[2, 3]], [[0, 3]])
        assert 0.99 < sk.privacy["loss"] <= 1.0
    only = dps.MarginalTables(box, [0, 1, 2, 3, (0, 1)], bins=4)  # every pair measured: the plain release
    _, _, none = make_spanning_sketch(
        dps.box_domain(box), dp.symmetric_distance(), Budget.of(epsilon=1.0), 1, only, measured=range(5)
    )
    assert none == 0


@pytest.mark.parametrize("measured", [[0, 9], [-1], [True], ["0"]])
def test_make_spanning_sketch_refuses_bad_blocks(measured):
    from opendp_sketch.adaptive import make_spanning_sketch
    from opendp_sketch.budget import Budget

    box = ([0.0] * 3, [1.0] * 3)
    fm = dps.MarginalTables.auto(box, fine_bins=4, coarse_bins=2)
    with pytest.raises(ValueError, match="must be indices of the 6 blocks"):
        make_spanning_sketch(
            dps.box_domain(box), dp.symmetric_distance(), Budget.of(epsilon=1.0), 1, fm, measured
        )
    with pytest.raises(ValueError, match="must be a MarginalTables map"):
        make_spanning_sketch(
            dps.box_domain(box),
            dp.symmetric_distance(),
            Budget.of(epsilon=1.0),
            1,
            dps.RFF(dim=3, num_features=8, seed=0),
            [0],
        )


def test_a_tree_alone_and_every_pair_with_a_choice():
    """``pairs="none"`` with a choice: the 1-way blocks and the chosen tree only (MST's design),
    within the budget; ``pairs="all"`` leaves nothing to choose and is refused before anything is
    read."""
    schema = dps.Schema({"x": (0.0, 1.0), "y": (0.0, 1.0), "z": (0.0, 1.0)}, rows=100_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # at 100 000 rows the tree's cells stand above the noise
        sk = dps.release_sketch(
            _frame().select("x", "y", "z"), schema=schema, epsilon=1.0, pair_selection=0.1, pairs="none"
        )
    one, two = sk.feature_map.maps
    assert [b.subset for b in one.blocks] == [(0,), (1,), (2,)] and len(two.blocks) == 2
    assert sk.privacy["epsilon"] <= 1.0 and len(sk.privacy["pair_selection"]["pairs"]) == 2
    with pytest.raises(ValueError, match="pairs='all' measures every 2-way marginal"):
        dps.release_sketch(_frame(), schema=SCHEMA, epsilon=1.0, pair_selection=0.1, pairs="all")


#: three numeric columns and a row estimate at which, at ε = 1, the rule keeps no pair and a tree's
#: cells stand above the noise: ``pair_selection="auto"`` (the default) chooses one
XYZ = dps.Schema({c: (0.0, 1.0) for c in "xyz"}, rows=10_000)
XYZ_ROWS = {k: v[:3] for k, v in ROWS.items() if not k.endswith(" c")}


def test_the_default_chooses_a_tree_where_it_pays():
    """``pair_selection="auto"``: a tenth of the budget on a tree where the rule leaves columns
    apart and its cells stand above the noise (no planning warning), nothing where they would
    not, nor with ``None``, ``pairs="all"``/``"none"`` or a given map; always within the budget."""
    frame = _frame().select("x", "y", "z")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sk = dps.release_sketch(frame, schema=XYZ, epsilon=1.0)
        plain = dps.release_sketch(frame, schema=XYZ, epsilon=1.0, pair_selection=None)
        few = dps.release_sketch(
            frame, schema=dps.Schema({c: (0.0, 1.0) for c in "xyz"}, rows=5000), epsilon=1.0
        )
        others = [dps.release_sketch(frame, schema=XYZ, epsilon=1.0, pairs=p) for p in ("all", "none")] + [
            dps.release_sketch(frame, dps.auto_feature_map(XYZ, epsilon=1.0), schema=XYZ, epsilon=1.0)
        ]
    record = sk.privacy["pair_selection"]
    assert record["fraction"] == 0.1 and len(record["pairs"]) == 2 and [0, 1] in record["pairs"]
    one, two = ([b.shape for b in m.blocks] for m in sk.feature_map.maps)
    assert one == [(16,)] * 3 and two == [(16, 16)] * 2
    assert 0.99 < sk.privacy["epsilon"] <= 1.0
    for other in (plain, few, *others):
        assert "pair_selection" not in other.privacy and 0.99 < other.privacy["epsilon"] <= 1.0


@pytest.mark.parametrize("kind", list(XYZ_ROWS))
def test_the_default_tree_same_kind_of_outcome(kind):
    """The default's choice to spend on a tree reads public inputs only: both neighbours release a
    tree of the same size (or the added row is refused on the curator's side), without warnings."""

    def release(frame):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                out: object = dps.release_sketch(frame, schema=XYZ, epsilon=1.0)
            except ValueError as e:
                out = e
        return out, [str(w.message) for w in seen]

    a, warned_a = release(_frame().select("x", "y", "z"))
    extra = pl.DataFrame([XYZ_ROWS[kind]], schema={c: pl.Float64 for c in "xyz"}, orient="row")
    b, warned_b = release(pl.concat([_frame().select("x", "y", "z"), extra]))
    assert isinstance(a, dps.Sketch) and warned_a == []
    if isinstance(b, ValueError):
        assert not isinstance(b, dp.OpenDPException) and kind in REFUSED, (kind, b)
        assert warned_b == []
        return
    assert isinstance(b, dps.Sketch) and kind not in REFUSED and warned_b == []
    assert len(b.privacy["pair_selection"]["pairs"]) == len(a.privacy["pair_selection"]["pairs"]) == 2
    assert b.feature_map.sensitivity(1) == a.feature_map.sensitivity(1)

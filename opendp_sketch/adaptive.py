"""Releases that plan from their own earlier answers, in one OpenDP adaptive composition.

* :func:`make_spanning_sketch`: MST's selection. Noisy-max rounds (OpenDP's ``make_noisy_max``
  on the exact independence scores of :mod:`opendp_sketch.selection`, ``4·d_in``-stable) choose
  the 2-way marginals joining the columns, then the sketch measures them.
* :func:`make_row_estimated_sketch`: a noisy row count (OpenDP's Laplace or Gaussian on the
  1-stable count), then the sketch whose map :mod:`opendp_sketch.plan` plans from that count.

Both fix every query's loss before the data is read (``make_adaptive_composition`` with
``d_mids``), and every later query is built from released answers only (post-processing),
so the composition's privacy map is the whole release's. Nothing here raises on the data: the
choices always have a candidate, and the plan from any count is a valid map.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import opendp.prelude as dp

from ._validate import check_fraction
from .backends.gathered import block_cells, gathered_keys, pair_of_cells
from .backends.memory import pair_transformation
from .backends.protocol import cached_sum_and_count
from .backends.tables import make_table_row_count, table_pass_of
from .budget import DEFAULT_COUNT_FRACTION, Budget, as_rho, rest_budget, search_measurement, search_scale
from .features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from .features.marginals import MarginalTables
from .measurements import make_noisy_sketch, make_private_sketch
from .plan import (
    AUTO_ONE_WAY_WEIGHT,
    AUTO_SELECTION,
    DEFAULT_SELECTION_FRACTION,
    auto_tree,
    kept_map,
    schema_blocks,
    schema_targets,
    tree_rounds,
    weighted_map,
)
from .schema import Schema
from .selection import Forest, PairCounts, make_independence_scores, noisy_max_scale
from .sketch import Sketch

__all__ = ["make_spanning_sketch", "make_row_estimated_sketch", "DEFAULT_ROWS_FRACTION"]

#: share of the budget a schema release without a public ``rows`` estimate spends on a noisy row
#: count first, to plan its map from (:func:`make_row_estimated_sketch`; measured in
#: docs/design/planning.md)
DEFAULT_ROWS_FRACTION = 0.03


def make_spanning_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    budget: Budget,
    d_in: int,
    marginals: MarginalTables,
    measured: Sequence[int],
    selection_fraction: float = DEFAULT_SELECTION_FRACTION,
    one_way_weight: float = AUTO_ONE_WAY_WEIGHT,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
    targets: Sequence[int] = (),
) -> tuple[dp.Measurement, FeatureMap, int]:
    r"""A release that first chooses, privately, the 2-way marginals joining the columns, then
    measures them with ``measured`` (MST's selection, in one OpenDP measurement).

    ``marginals`` holds every candidate block; ``measured`` indexes the ones measured in any case
    (every 1-way block, the 2- and 3-way blocks a public rule kept). When those leave the columns
    in ``c`` connected components, each of ``k`` rounds picks the 2-way candidate of highest
    :mod:`independence score <opendp_sketch.selection>` among those joining two components
    (Kruskal on noisy scores: OpenDP's ``make_noisy_max``, ``4·d_in``-stable scores); ``k`` is
    the number of components the candidates can join (``c − 1`` when every pair is a candidate,
    as in the automatic map). The pairs picked then join ``measured`` in the sketch's map (1-way
    blocks at ``one_way_weight``), released as :func:`make_private_sketch` releases it, its exact
    pair read off the pass that counted the candidates (:class:`SharedPass`: a table is read
    once). OpenDP's ``make_adaptive_composition`` composes the ``k`` choices
    (``selection_fraction`` of the budget, split evenly) and the release (the rest), with every
    loss fixed before the data is read; each query is a measurement on the same input, chosen
    from earlier answers only.

    Every choice gives a map of the same sensitivity (each block, whatever its shape, takes one
    cell per row), so the release's noise scale is fixed up front and each query meets its
    share. Nothing raises on the data: while fewer than ``k`` pairs are picked some candidate
    joins two components, so every round has a choice, and the scores read exact counts.
    ``k = 0`` (a connected rule, or no candidate joining anything) needs no choice: the plain
    release of ``measured`` at the whole budget.

    :return: the measurement (data → :class:`~opendp_sketch.Sketch`), a map of the shape the
        release will have (its first ``k`` candidates: the same sensitivity and noise), and the
        number of rounds ``k``
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.adaptive import Budget, make_spanning_sketch
    >>> from opendp_sketch.features.marginals import MarginalTables
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = MarginalTables.auto(([0.0] * 3, [1.0] * 3), fine_bins=8, coarse_bins=4)
    >>> m, shape, rounds = make_spanning_sketch(dps.box_domain(([0.0] * 3, [1.0] * 3)), dp.symmetric_distance(),
    ...     Budget.of(epsilon=1.0), 1, fm, measured=[0, 1, 2])
    >>> rounds, m.map(1) <= 1.0
    (2, True)
    >>> x = np.random.default_rng(0).random((2000, 1))
    >>> X = np.hstack([x, 1 - x, np.random.default_rng(1).random((2000, 1))])
    >>> tree = m(X).privacy["pair_selection"]["pairs"]   # 2 pairs join 3 columns: (0, 1) is almost sure
    >>> len(tree), [0, 1] in tree
    (2, True)
    """
    selection_fraction = check_fraction(selection_fraction, "selection_fraction")
    if not isinstance(marginals, MarginalTables):
        raise ValueError(
            f"marginals ({marginals!r}) must be a MarginalTables map holding every candidate block"
        )
    blocks = marginals.blocks
    given = list(measured)
    if not all(
        isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < len(blocks) for i in given
    ):
        raise ValueError(f"measured ({given!r}) must be indices of the {len(blocks)} blocks of marginals")
    measured = sorted({int(i) for i in given})
    pairs_of = [b.subset for b in blocks]
    joins = [pairs_of[i] for i in measured if len(pairs_of[i]) > 1]
    candidates, rounds = tree_rounds(marginals, measured)

    def final_map(chosen: Sequence[int]) -> FeatureMap:
        return weighted_map(
            marginals.take(sorted(measured + [candidates[c] for c in chosen])), one_way_weight, targets
        )

    def sketch_of(fm: FeatureMap, measure: dp.Measure) -> Callable[[float], dp.Measurement]:
        return lambda scale: make_private_sketch(
            input_domain, input_metric, measure, fm, scale, count_fraction, chunk_rows, n_jobs
        )

    if rounds == 0:
        fm = final_map([])
        return (
            search_measurement(sketch_of(fm, budget.measure), budget, d_in, fm.sensitivity(budget.p)),
            fm,
            0,
        )
    # the loss in the measure the noise is calibrated in: ε, or ρ (an (ε, δ) budget converts at the end)
    total = float(budget.d_out) if budget.kind == "epsilon" else as_rho(budget, d_in)
    measure = budget.measure
    template = final_map(range(rounds))
    other = final_map(range(len(candidates) - rounds, len(candidates)))
    if (template.sensitivity(1), template.sensitivity(2), template.unit) != (
        other.sensitivity(1),
        other.sensitivity(2),
        other.unit,
    ):  # not expected: every marginal block takes one cell per row
        raise ValueError("the candidate 2-way marginals give maps of different sensitivities")
    candidate_map = marginals.take(candidates)
    if candidate_map.unit != 1.0:  # the scores read the exact sums as cell counts
        raise ValueError("the candidate 2-way marginals must sum one integer per row and cell")
    # the release's blocks that are not candidates (1-way, a rule's), summed in the candidates' pass
    measured_map = marginals.take(measured) if measured else None
    cand_blocks = candidate_map.blocks
    cand_pairs = [b.subset for b in cand_blocks]

    # the candidates' and the measured blocks' counts, one pass per dataset (kept until the release)
    shared = SharedPass(input_domain, input_metric, candidate_map, measured_map, chunk_rows, n_jobs)

    def choose(
        subset: Sequence[int], memo: dict[str, Any], shared: SharedPass, noise: float
    ) -> dp.Measurement:
        return (
            make_independence_scores(
                input_domain, input_metric, shared.candidate_counts, cand_blocks, subset, memo
            )
            >> dp.m.then_noisy_max(measure, noise)  # the index, a Python int (no post-processor)
        )

    per_round = total * selection_fraction / rounds
    noise = noisy_max_scale(measure, d_in, per_round)
    round_loss = choose(range(len(candidates)), {}, shared, noise).map(d_in)
    # the release gets what the rounds left
    base = rest_budget(input_domain, input_metric, measure, d_in, [round_loss] * rounds, total)
    # the final release at the smallest scale certified for its share; every choice has this map
    scale = search_scale(sketch_of(template, measure), base, d_in, template.sensitivity(base.p))
    d_mids = [round_loss] * rounds + [sketch_of(template, measure)(scale).map(d_in)]
    adaptive = dp.c.make_adaptive_composition(input_domain, input_metric, measure, d_in=d_in, d_mids=d_mids)

    names = getattr(getattr(input_domain, "descriptor", None), "column_names", None)
    spent = adaptive.map(d_in)  # every query's loss, fixed up front

    def drive(queryable: Any) -> Sketch:
        memo: dict[str, Any] = {}  # the candidates' scores of this release's one dataset
        joined = Forest(marginals.input_dim, joins)
        chosen: list[int] = []
        pair_array = np.array(cand_pairs, dtype=np.int64).reshape(-1, 2)
        for _ in range(rounds):
            open_ = joined.crossing(pair_array)  # never empty while fewer than k are picked
            c = open_[queryable(choose(open_, memo, shared, noise))]
            chosen.append(c)
            joined.join(cand_pairs[c])
        memo.clear()
        fm = final_map(chosen)
        pair = shared.pair_of(fm)  # the release's exact pair, read off the same pass
        sk = queryable(pair >> make_noisy_sketch(pair, measure, fm, scale, count_fraction))
        shared.clear()
        record: dict[str, Any] = {
            "fraction": selection_fraction,
            "pairs": [list(cand_pairs[c]) for c in chosen],
        }
        if names is not None:
            record["columns"] = [[names[j] for j in cand_pairs[c]] for c in chosen]
        sk.privacy["pair_selection"] = record
        sk.privacy["loss"] = spent  # the choice's and the release's (release_sketch renames it)
        return sk

    return budget.finish(adaptive >> dp.new_function(drive, TO="ExtrinsicObject")), template, rounds


class _Read(NamedTuple):
    """What one pass found on one dataset (held by identity)."""

    data: Any
    candidates: np.ndarray
    rows: int
    cells: dict[tuple[Any, ...], np.ndarray]


class SharedPass:
    """One pass over one release's dataset for a private tree of pairs: the exact counts of
    every candidate block (the scores') and of the blocks measured in any case, from the same
    read and encoding of each batch (:func:`~opendp_sketch.backends.tables.table_pass` for a
    table under a schema, the candidates counted by :class:`~opendp_sketch.selection.PairCounts`;
    elsewhere the candidates' own pass, and the release its own).

    The release's exact pair is then read off those counts (:meth:`pair_of`): every block of the
    released map is a candidate or a measured block, and a block's sum is its cells' counts times
    the integer a cell adds per row (:func:`~opendp_sketch.backends.gathered.pair_of_cells`),
    saturated as a pass's totals are: the same integers as the map's own pass, so the pair is the
    same function of the data and keeps its stability. The counts are kept for the one dataset
    last read (by identity, in one immutable record, so a reader never mixes two datasets) until
    :meth:`clear`; their memory is the maps' size, not the rows'. Nothing here raises on data.
    """

    def __init__(
        self,
        input_domain: dp.Domain,
        input_metric: dp.Metric,
        candidates: MarginalTables,
        measured: MarginalTables | None,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        n_jobs: int | None = None,
    ) -> None:
        self._domain, self._metric = input_domain, input_metric
        self._chunk_rows, self._n_jobs = chunk_rows, n_jobs
        self._candidates, self._measured = candidates, measured
        counter = PairCounts(candidates)
        run = table_pass_of(
            input_domain, [counter] if measured is None else [counter, measured], chunk_rows, n_jobs
        )
        self._counter: PairCounts | None = counter
        if run is None:  # another backend: the candidates' own pass (a cluster's reads its gathered pass)
            pair = cached_sum_and_count(input_domain, input_metric, candidates, chunk_rows, n_jobs)
            self._counter, self._measured = None, None

            def run(data: Any) -> tuple[list[np.ndarray], int]:
                s, n = pair(data)
                return [np.asarray(s)], int(n)

        self._run = run
        self._last: _Read | None = None

    def _read(self, data: Any) -> _Read:
        last = self._last
        if last is None or last.data is not data:
            sums, rows = self._run(data)
            counts = np.asarray(sums[0]) if self._counter is None else self._counter.cells(sums[0], rows)
            cells = block_cells(self._candidates, counts)
            if self._measured is not None:
                cells.update(block_cells(self._measured, np.asarray(sums[1])))
            last = self._last = _Read(data, counts, rows, cells)
        return last

    def candidate_counts(self, data: Any) -> tuple[np.ndarray, int]:
        """The exact ``(cell counts, n)`` of the candidates' map on ``data``."""
        read = self._read(data)
        return read.candidates, read.rows

    def pair_of(self, feature_map: FeatureMap) -> dp.Transformation:
        """The exact pair ``(Σ q(x_i), n)`` of ``feature_map`` (made of candidate and measured
        blocks) read off the pass, as a backend's pair transformation; a map or dataset the pass
        cannot serve runs the map's own pass."""
        own = cached_sum_and_count(self._domain, self._metric, feature_map, self._chunk_rows, self._n_jobs)
        keys = gathered_keys(feature_map)
        if keys is None:
            return own

        def function(data: Any) -> tuple[np.ndarray, int]:
            read = self._read(data)
            got = pair_of_cells(read.cells, read.rows, keys)
            return got if got is not None else own(data)

        return pair_transformation(self._domain, self._metric, feature_map, function)

    def clear(self) -> None:
        """Forget the dataset and its counts (the release is done)."""
        self._last = None


def make_row_estimated_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    budget: Budget,
    d_in: int,
    schema: Schema,
    rows_fraction: float = DEFAULT_ROWS_FRACTION,
    *,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    fine_bins: int | None = None,
    pairs: str = "rule",
    pair_selection: float | str | None = AUTO_SELECTION,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> dp.Measurement:
    r"""A schema release that first counts the rows privately, then plans its map from the count.

    Without a public ``rows`` estimate, the automatic map cannot know whether 2-way marginals
    at 16 bins stand above the noise, nor where a tree of pairs pays. This measurement spends
    ``rows_fraction`` of the budget on a noisy row count (OpenDP's discrete Laplace or Gaussian
    on the table's 1-stable row count), and the rest on the sketch whose map
    (:func:`auto_feature_map`, with the pair rule and tree) is planned from that count as if it
    were the schema's ``rows``. OpenDP's ``make_adaptive_composition`` composes the two, both
    losses fixed before the data is read; the plan reads only the released count, so it is
    post-processing. The sketch records ``privacy["rows_estimate"]``.

    :return: a measurement from the table to the :class:`~opendp_sketch.Sketch`
    :example:

    >>> import polars as pl, numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.backends.tables import table_domain
    >>> from opendp_sketch.budget import Budget
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> schema = dps.Schema({"x": (0, 1), "c": ["a", "b"]})
    >>> m = make_row_estimated_sketch(table_domain(schema), dp.symmetric_distance(), Budget.of(epsilon=1.0), 1, schema)
    >>> m.map(1) <= 1.0
    True
    >>> rng = np.random.default_rng(0)
    >>> sk = m(pl.DataFrame({"x": rng.random(20_000), "c": rng.choice(["a", "b"], 20_000)}))
    >>> abs(sk.privacy["rows_estimate"]["rows"] - 20_000) < 2_000
    True
    """
    rows_fraction = check_fraction(rows_fraction, "rows_fraction")
    measure = budget.measure
    total = float(budget.d_out) if budget.kind == "epsilon" else as_rho(budget, d_in)
    counter = make_table_row_count(input_domain, input_metric)

    def count_of(scale: float) -> dp.Measurement:
        noise = dp.m.then_laplace(scale) if budget.kind == "epsilon" else dp.m.then_gaussian(scale)
        return counter >> noise

    count_scale = dp.binary_search_param(count_of, d_in=d_in, d_out=total * rows_fraction, T=float)
    count_loss = count_of(count_scale).map(d_in)
    # the sketch gets what the count left
    base = rest_budget(input_domain, input_metric, measure, d_in, [count_loss], total)
    adaptive = dp.c.make_adaptive_composition(
        input_domain, input_metric, measure, d_in=d_in, d_mids=[count_loss, float(base.d_out)]
    )
    spent = adaptive.map(d_in)
    auto = isinstance(pair_selection, str) and pair_selection == AUTO_SELECTION

    def drive(queryable: Any) -> Sketch:
        noisy = int(queryable(count_of(count_scale)))
        rows = max(1, noisy)  # post-processing of the released count
        planned = Schema({c: schema[c] for c in schema.data_columns}, rows=rows, targets=schema.targets)
        full, keep = schema_blocks(
            planned,
            **base.kwargs(),
            count_fraction=count_fraction,
            one_way_weight=AUTO_ONE_WAY_WEIGHT,
            fine_bins=fine_bins,
            pairs=pairs,
        )
        selection = pair_selection
        if auto:
            selection = auto_tree(base, full, keep, rows, count_fraction) if pairs == "rule" else None
        if selection is not None:
            meas, _, _ = make_spanning_sketch(
                input_domain,
                input_metric,
                base,
                d_in,
                full,
                keep,
                float(selection),
                one_way_weight=AUTO_ONE_WAY_WEIGHT,
                count_fraction=count_fraction,
                chunk_rows=chunk_rows,
                n_jobs=n_jobs,
                targets=schema_targets(planned),
            )
        else:
            fm = kept_map(full, keep, AUTO_ONE_WAY_WEIGHT, schema_targets(planned))

            def sketch_at(scale: float) -> dp.Measurement:
                return make_private_sketch(
                    input_domain, input_metric, measure, fm, scale, count_fraction, chunk_rows, n_jobs
                )

            meas = sketch_at(search_scale(sketch_at, base, d_in, fm.sensitivity(base.p)))
        sk = queryable(meas)
        sk.privacy["rows_estimate"] = {"rows": rows, "fraction": rows_fraction, "noisy_count": noisy}
        sk.privacy["loss"] = spent
        return sk

    return budget.finish(adaptive >> dp.new_function(drive, TO="ExtrinsicObject"))

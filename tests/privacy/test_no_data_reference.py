"""A released object never holds the sensitive data it was computed from.

OpenDP's ``Measurement.__call__`` records each call on its output for ``dp.serialize``
(``output.__opendp_dict__ = {..., "arg": data}``). On a released :class:`~opendp_sketch.Sketch`
that record would keep the whole table (or its LazyFrame) alive and reachable from the object a
curator hands out. Every release path must drop it.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import opendp.prelude as dp
import polars as pl

import opendp_sketch as dps
from opendp_sketch.measurements import forget_input
from opendp_sketch.session import Session


def _holds_no_data(sk: dps.Sketch) -> None:
    assert isinstance(sk, dps.Sketch)
    assert not hasattr(sk, "__opendp_dict__")
    assert "__opendp_dict__" not in vars(sk)


class _Table(np.ndarray):
    """An ndarray subclass, so a weak reference can watch the data's lifetime."""


def test_release_sketch_does_not_keep_the_data_alive(hist2d):
    X = np.random.default_rng(0).uniform(0, 1, size=(500, 2)).view(_Table)
    alive = weakref.ref(X)
    sk = dps.release_sketch(X, hist2d, bounds=(0.0, 1.0), epsilon=1.0)
    _holds_no_data(sk)
    del X
    gc.collect()
    assert alive() is None  # only the sketch is left, and it does not reference the table


def test_schema_file_session_and_context_releases_hold_no_data(tmp_path, data2d, hist2d):
    frame = pl.DataFrame({"a": [0.1, 0.7] * 100, "b": ["x", "y"] * 100})
    schema = dps.Schema({"a": (0, 1), "b": ["x", "y"]})
    _holds_no_data(dps.release_sketch(frame, schema=schema, epsilon=1.0))
    path = tmp_path / "t.parquet"
    frame.write_parquet(path)
    _holds_no_data(dps.release_sketch(path, schema=schema, epsilon=1.0))
    with Session.open(str(tmp_path / "l.db"), "ds", epsilon=1.0) as s:
        _holds_no_data(s.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=0.3))
    ctx = dp.Context.compositor(
        data=data2d,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=1.0),
        domain=dps.box_domain((0.0, 1.0), num_columns=2),
        split_evenly_over=1,
    )
    _holds_no_data(ctx.query().private_sketch(hist2d).release())


def test_forget_input_drops_the_record_from_any_output():
    class Fitted:
        pass

    out = Fitted()
    out.__opendp_dict__ = {"__kwargs__": {"arg": np.ones(3)}}
    assert forget_input(out) is out and not hasattr(out, "__opendp_dict__")
    both = [Fitted(), 1.5]
    both[0].__opendp_dict__ = {}
    forget_input(both)
    assert not hasattr(both[0], "__opendp_dict__")
    assert forget_input(np.ones(2)).shape == (2,)  # objects without the record pass through


def test_an_estimator_chained_into_a_measurement_holds_no_data():
    X = np.random.default_rng(1).uniform(0, 1, size=(400, 2))
    fm = dps.Histogram(bounds=(0, 1), bins=4, dim=2)
    meas = dps.make_private_sketch(
        dps.box_domain((0, 1), 2), dp.symmetric_distance(), dp.max_divergence(), fm, scale=2.0
    )
    est = (meas >> dps.then_m2m(None, n_samples=500))(X)
    assert isinstance(est, dps.M2M) and not hasattr(est, "__opendp_dict__")
    _holds_no_data(est.sketch)


def test_a_frame_chained_into_a_measurement_holds_no_data():
    X = np.random.default_rng(2).uniform(0, 1, size=(400, 2))
    fm = dps.Histogram(bounds=(0, 1), bins=4, dim=2)
    meas = dps.make_private_sketch(
        dps.box_domain((0, 1), 2), dp.symmetric_distance(), dp.max_divergence(), fm, scale=2.0
    )
    frame = (meas >> dps.then_m2m("weighted_frame", n_samples=500))(X)
    assert isinstance(frame, pl.DataFrame) and frame.height > 0
    assert not hasattr(frame, "__opendp_dict__")

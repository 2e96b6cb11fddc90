"""Budget-accounted sessions: every release of a dataset goes through an OpenDP privacy filter built
from the budget a persistent SQLite ledger says is left, and is recorded before it is returned.

A curator opens a :class:`Session` for a dataset with a total budget (pure ε, (ε, δ) or ρ, the
conventions of :func:`~opendp_sketch.release_sketch`). Each release then runs, while holding the
ledger's write lock,

1. read the remaining budget (exact fractions) from the ledger;
2. ``make_privacy_filter(make_fully_adaptive_composition(...), d_in, d_out=remaining)``, invoke it
   on the data, and submit the release measurement to it: **the filter refuses** a release that
   does not fit;
3. record the loss OpenDP reports (and the sketch) and commit; only then is the release returned.

A failure anywhere rolls the transaction back: nothing is recorded, nothing is spent, nothing is
returned. Analyses of released sketches are post-processing; :meth:`Session.analyze` logs them at
no cost. See ``docs/sessions.md`` for the durability and locking argument.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, TypeVar

import numpy as np
import opendp.prelude as dp

from .backends.memory import memory_source
from .budget import DEFAULT_COUNT_FRACTION, Budget, search_measurement
from .features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from .ledger import (
    DEFAULT_TIMEOUT,
    DatasetRecord,
    Ledger,
    LedgerBusyError,
    LedgerError,
    PrivacyBudgetError,
    ReleaseFailedError,
    describe,
    float_down,
    float_up,
    verify_ledger,
)
from .measurements import check_release_arguments, then_private_sketch
from .plan import Plan
from .release import prepare_table_release
from .sketch import Sketch, SketchFormatError

__all__ = [
    "Session",
    "PrivacyBudgetError",
    "ReleaseFailedError",
    "LedgerError",
    "LedgerBusyError",
    "verify_ledger",
    "sketch_to_bytes",
    "sketch_from_bytes",
]

T = TypeVar("T")

_MEASURES = {
    "epsilon": dp.max_divergence(),
    "epsilon_delta": dp.approximate(dp.max_divergence()),
    "rho": dp.zero_concentrated_divergence(),
}
#: released values larger than this (as JSON) are recorded without the value
_MAX_RESULT_CHARS = 1 << 20


def sketch_to_bytes(sketch: Sketch, key: bytes | str | None = None) -> bytes:
    """The bytes :meth:`Sketch.save <opendp_sketch.Sketch.save>` writes (zip of JSON and int64
    arrays), signed with ``key`` if one is given."""
    with tempfile.TemporaryDirectory(prefix="opendp_sketch_") as tmp:
        path = os.path.join(tmp, "sketch.npz")
        sketch.save(path, key=key)
        with open(path, "rb") as f:
            return f.read()


def sketch_from_bytes(blob: bytes, name: str = "sketch", key: bytes | str | None = None) -> Sketch:
    """Inverse of :func:`sketch_to_bytes`, through :meth:`Sketch.load <opendp_sketch.Sketch.load>`'s
    checks (format, version, sizes, schema, checksum, and with ``key`` the signature; never unpickles).

    :param name: how the blob is named in error messages
    :raises SketchFormatError: if the bytes are not an intact sketch (or not signed with ``key``)
    """
    buffer = io.BytesIO(blob)
    try:
        return Sketch.load(buffer, key=key)  # type: ignore[arg-type]  # np.load reads file objects too
    except SketchFormatError as e:
        raise type(e)(str(e).replace(str(buffer), name)) from None


def _as_loss(value: Any) -> tuple[float, float]:
    """OpenDP's loss (a float, or ``(ε, δ)``) as a pair ``(ε or ρ, δ)``."""
    return (float(value[0]), float(value[1])) if isinstance(value, tuple) else (float(value), 0.0)


def _nothing(_: Any) -> None:
    return None


def _privacy_filter(meas: dp.Measurement, data: Any, d_in: Any, d_out: Any) -> Any:
    """A fresh OpenDP privacy filter with budget ``d_out`` for queries like ``meas``, holding ``data``."""
    odometer = dp.c.make_fully_adaptive_composition(meas.input_domain, meas.input_metric, meas.output_measure)
    return dp.c.make_privacy_filter(odometer, d_in=d_in, d_out=d_out)(data)


def _result_json(value: Any) -> str | None:
    """The released value as JSON when it is small and plain (numbers, strings, arrays)."""

    def plain(v: Any) -> Any:
        if isinstance(v, (np.ndarray, np.generic)):
            return v.tolist()
        raise TypeError

    try:
        text = json.dumps(value, default=plain, allow_nan=True)
    except (TypeError, ValueError):
        return None
    return text if len(text) <= _MAX_RESULT_CHARS else None


class Session:
    """A dataset's privacy budget, spent release by release through OpenDP privacy filters and
    recorded in a SQLite ledger shared by every process that opens the same file.

    Create one with :meth:`Session.open`. ``remaining`` and ``spent`` are in OpenDP's form for the
    session's measure: a float (ε or ρ) or a tuple ``(ε, δ)``.

    :ivar dataset_id: the dataset this session spends for
    :ivar budget: ``"epsilon"``, ``"epsilon_delta"`` or ``"rho"``
    :ivar measure: the OpenDP output measure every release must have
    :ivar contributions: the dataset's privacy unit (rows per individual), fixed at creation;
        every release is charged at it
    :ivar ledger: the :class:`~opendp_sketch.ledger.Ledger` connection
    :ivar last_release_id: id of the latest release made through this session (``None`` before)
    """

    def __init__(
        self, ledger: Ledger, dataset_id: str, budget: str, unit: int = 1, key: bytes | str | None = None
    ) -> None:
        self.ledger = ledger
        self._key = key
        self.dataset_id = dataset_id
        self.budget = budget
        self.measure = _MEASURES[budget]
        self.contributions = unit
        self.last_release_id: int | None = None

    @classmethod
    def open(
        cls,
        ledger_path: str | os.PathLike[str],
        dataset_id: str,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        contributions: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        key: bytes | str | None = None,
    ) -> Session:
        """Open (or create) the session of ``dataset_id`` in the ledger file ``ledger_path``.

        The first open fixes the dataset's total budget and its privacy unit; later opens may
        restate the same ones or give none. The remaining budget always comes from the ledger,
        recomputed from its hash chain: after a crash or a restart it is what the committed
        releases left, never more, and a ledger whose rows were altered is refused.

        :param ledger_path: SQLite file (created if missing; its directory must exist)
        :param dataset_id: a non-empty name for the dataset
        :param epsilon: total ε (pure ε-DP, or (ε, δ)-DP with ``delta``)
        :param delta: total δ
        :param rho: total ρ (zCDP)
        :param contributions: the privacy unit: how many rows one individual may contribute
            (default 1 at creation). Every release of the dataset is accounted at this unit.
        :param timeout: seconds to wait for another process's release to finish
        :param key: a curator's secret key (bytes, at least 16): a dataset created with it has
            every release row and stored sketch signed (HMAC-SHA256), and must be reopened with it
        :return: the session
        :raises ValueError: for bad arguments
        :raises LedgerError: if the dataset exists with a different total or unit, or is new and
            no budget is given, or the file is not a ledger, or its hash chain or (with a key)
            signatures show it was tampered with, or it is signed and no key is given
        :example:

        >>> import tempfile, os, opendp.prelude as dp, opendp_sketch.session as ss
        >>> dp.enable_features("contrib", "honest-but-curious")
        >>> path = os.path.join(tempfile.mkdtemp(), "ledger.db")
        >>> s = ss.Session.open(path, "survey", epsilon=1.0)
        >>> s.remaining, s.spent, s.measure
        (1.0, 0.0, MaxDivergence)
        >>> ss.Session.open(path, "survey").budget     # reopen without restating the total
        'epsilon'
        >>> ss.Session.open(path, "survey", epsilon=2.0)
        Traceback (most recent call last):
        ...
        opendp_sketch.ledger.LedgerError: dataset 'survey' already has a total budget of ε = 1 ...
        """
        if not isinstance(dataset_id, str) or not dataset_id:
            raise ValueError(f"dataset_id ({dataset_id!r}) must be a non-empty string")
        if contributions is not None and (
            isinstance(contributions, bool) or not isinstance(contributions, int) or contributions < 1
        ):
            raise ValueError(f"contributions ({contributions!r}) must be a positive integer")
        if epsilon is None and delta is None and rho is None:
            budget, total = None, None
        else:
            parsed = Budget.of(epsilon, delta, rho)
            budget, d_out = parsed.kind, parsed.d_out
            total = (d_out[0], d_out[1]) if isinstance(d_out, tuple) else (d_out, 0.0)
        ledger = Ledger(ledger_path, timeout=timeout, key=key)
        try:
            record = ledger.ensure_dataset(dataset_id, budget, total, contributions)
        except BaseException:
            ledger.close()
            raise
        return cls(ledger, dataset_id, record.budget, record.unit, key)

    def close(self) -> None:
        """Close the ledger connection."""
        self.ledger.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Session({self.dataset_id!r}, {self.ledger.path!r}, {self.budget}, "
            f"contributions={self.contributions}, remaining={self.remaining})"
        )

    # -- budget ---------------------------------------------------------------------------------
    def _record(self) -> DatasetRecord:
        rec = self.ledger.dataset(self.dataset_id)
        if rec is None:
            raise LedgerError(f"dataset {self.dataset_id!r} has disappeared from {self.ledger.path}")
        return rec

    def _opendp_form(self, pair: tuple[float, float]) -> float | tuple[float, float]:
        return pair if self.budget == "epsilon_delta" else pair[0]

    @property
    def total(self) -> float | tuple[float, float]:
        """The dataset's total budget."""
        rec = self._record()
        return self._opendp_form((float(rec.total[0]), float(rec.total[1])))

    @property
    def spent(self) -> float | tuple[float, float]:
        """Budget spent by all committed releases of this dataset (rounded up), from the ledger."""
        rec = self._record()
        return self._opendp_form((float_up(rec.spent[0]), float_up(rec.spent[1])))

    @property
    def remaining(self) -> float | tuple[float, float]:
        """Budget left (rounded down), from the ledger: other processes' releases count too."""
        rec = self._record()
        return self._opendp_form((float_down(rec.remaining[0]), float_down(rec.remaining[1])))

    # -- releases -------------------------------------------------------------------------------
    def release(
        self, measurement: dp.Measurement, data: Any, d_in: Any = None, *, description: str | None = None
    ) -> Any:
        """Release ``measurement(data)`` through a privacy filter holding the remaining budget.

        The measurement's output measure must be the session's; in an (ε, δ) session a pure-ε
        measurement is also accepted (OpenDP's ``make_approximate``, δ = 0). A released
        :class:`~opendp_sketch.Sketch` is stored and can be read back with :meth:`load_sketch`;
        other small plain values (numbers, arrays, lists) are recorded with the release.

        :param measurement: any OpenDP measurement
        :param data: the dataset, a member of ``measurement.input_domain``
        :param d_in: the privacy unit as a distance under ``measurement.input_metric``: the
            dataset's ``contributions`` (the default); any other value is refused, so that every
            loss the ledger adds is a loss of the same unit
        :param description: free text stored with the release
        :return: what the measurement released
        :raises PrivacyBudgetError: if the filter refuses the release (nothing is spent)
        :raises ReleaseFailedError: if the computation fails once the filter accepted it: nothing
            is released and the loss is charged (the data was read)
        :raises ValueError: if the measure does not match, ``d_in`` is not the dataset's unit, or
            the loss at ``d_in`` is undefined
        :raises LedgerBusyError: if another release held the ledger longer than the timeout
        :example:

        >>> import tempfile, os, opendp.prelude as dp, opendp_sketch.session as ss
        >>> dp.enable_features("contrib", "honest-but-curious")
        >>> s = ss.Session.open(os.path.join(tempfile.mkdtemp(), "l.db"), "ages", epsilon=1.0)
        >>> space = (dp.vector_domain(dp.atom_domain(bounds=(0.0, 100.0), nan=False)), dp.symmetric_distance())
        >>> noisy_sum = space >> dp.t.then_sum() >> dp.m.then_laplace(200.0)
        >>> isinstance(s.release(noisy_sum, [30.0, 41.0, 52.0]), float), s.spent
        (True, 0.5)
        >>> s.release(noisy_sum, [30.0, 41.0, 52.0], d_in=2)
        Traceback (most recent call last):
        ...
        ValueError: d_in (2) must be the privacy unit of dataset 'ages': contributions=1, fixed when it was created...
        """
        if not isinstance(measurement, dp.Measurement):
            raise ValueError(f"measurement ({type(measurement).__name__}) must be an OpenDP Measurement")
        measurement = self._lift(measurement)
        if description is not None and not isinstance(description, str):
            raise ValueError(f"description ({description!r}) must be a string")
        summary = f"{type(measurement.output_measure).__name__} measurement on {measurement.input_domain}"[
            :200
        ]
        if d_in is not None:
            self._unit("d_in", d_in)
        return self._release(measurement, data, summary, description)

    def _lift(self, measurement: dp.Measurement) -> dp.Measurement:
        """``measurement`` with the session's output measure, or a clear error."""
        measure = measurement.output_measure
        if measure == self.measure:
            return measurement
        if self.budget == "epsilon_delta" and measure == dp.max_divergence():
            return dp.c.make_approximate(measurement)
        hint = {
            "epsilon": "a pure ε measurement (e.g. Laplace noise)",
            "epsilon_delta": "an (ε, δ) or pure ε measurement (convert zCDP with dp.c.make_zCDP_to_approxDP "
            "and dp.c.make_fix_delta)",
            "rho": "a zCDP measurement (e.g. Gaussian noise)",
        }[self.budget]
        raise ValueError(
            f"the measurement's output measure ({measure}) does not match this session's ({self.measure}); "
            f"give {hint}"
        )

    def release_sketch(
        self,
        data: Any,
        feature_map: FeatureMap | Plan,
        bounds: Any = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        contributions: int | None = None,
        count_fraction: float = DEFAULT_COUNT_FRACTION,
        impute: float | Sequence[float] | None = None,
        column_names: Sequence[str] | None = None,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        n_jobs: int | None = None,
        description: str | None = None,
    ) -> Sketch:
        """Release a sketch of ``data`` spending the given share of the session's budget.

        Arguments are those of :func:`~opendp_sketch.release_sketch` (numpy or Polars data in
        memory) and are checked the same way before anything is released; ``contributions``
        defaults to the dataset's privacy unit and may only restate it. The measurement is
        ``make_box_clip >> then_private_sketch`` at the smallest noise scale OpenDP certifies for
        the share; it is then released through the session's privacy filter. The sketch is
        stored in the ledger; ``sketch.privacy["release_id"]`` is its id for :meth:`load_sketch`.

        A :class:`~opendp_sketch.Plan` may stand in for the map (``release_sketch(data, plan)``):
        a box plan as above, or a schema plan, released as :func:`~opendp_sketch.release_sketch`
        releases it (any table; the plan's budget is the share), through the session's filter.

        :return: the released :class:`~opendp_sketch.Sketch`
        :raises PrivacyBudgetError: if the share exceeds the remaining budget (nothing is spent)
        :raises ValueError: on bad parameters or data, a budget of another kind than the
            session's, or ``contributions`` other than the dataset's unit (nothing is spent)
        :example:

        >>> import tempfile, os, numpy as np, opendp.prelude as dp, opendp_sketch as dps
        >>> import opendp_sketch.session as ss
        >>> dp.enable_features("contrib", "honest-but-curious")
        >>> s = ss.Session.open(os.path.join(tempfile.mkdtemp(), "l.db"), "survey", epsilon=1.0)
        >>> X = np.random.default_rng(0).uniform(0, 1, size=(500, 2))
        >>> fm = dps.Histogram(bounds=(0, 1), bins=4, dim=2)
        >>> sk = s.release_sketch(X, fm, bounds=(0, 1), epsilon=0.25)
        >>> s.load_sketch(sk.privacy["release_id"]).feature_map == fm, s.remaining >= 0.75 - 1e-9
        (True, True)
        """
        if isinstance(feature_map, Plan):  # release_sketch(data, plan): the plan holds the rest
            plan = feature_map
            if plan.kind == "schema":
                return self._release_table(data, plan, chunk_rows, n_jobs, description)
            assert plan.feature_map is not None
            feature_map, bounds, impute, column_names = (
                plan.feature_map,
                plan.bounds,
                plan.impute,
                plan.column_names,
            )
            contributions, count_fraction = plan.contributions, plan.count_fraction
            epsilon, delta, rho = (
                plan.budget.kwargs().get("epsilon"),
                plan.budget.delta,
                plan.budget.kwargs().get("rho"),
            )
        contributions = self._unit(
            "contributions", self.contributions if contributions is None else contributions
        )
        count_fraction = check_release_arguments(feature_map, contributions, count_fraction)
        share = self._share(Budget.of(epsilon, delta, rho))
        measure = share.measure
        X, source = memory_source(data, feature_map, bounds, impute, column_names, None)

        def build(scale: float) -> dp.Measurement:
            return source >> then_private_sketch(
                measure, feature_map, scale, count_fraction, chunk_rows, n_jobs
            )

        meas = self._lift(search_measurement(build, share, contributions, feature_map.sensitivity(share.p)))
        mech = share.mechanism
        summary = f"{type(feature_map).__name__} m={feature_map.num_features} {mech} fingerprint={feature_map.fingerprint()}"
        return self._release(meas, X, summary, description)

    def _release_table(
        self, data: Any, plan: Plan, chunk_rows: int, n_jobs: int | None, description: str | None
    ) -> Sketch:
        """A schema plan's release through the session's filter: the table checked and the
        measurement built exactly as :func:`~opendp_sketch.release_sketch` builds it (a noisy
        row count, a private tree of pairs, or the sketch alone), then filtered and recorded."""
        self._unit("contributions", plan.contributions)
        share = self._share(plan.budget)
        prepared = prepare_table_release(data, plan, chunk_rows, n_jobs)
        meas = self._lift(prepared.measurement)
        schema = plan.schema
        assert schema is not None
        summary = f"schema plan columns={schema.columns} pairs={plan.pairs} {share.mechanism}"
        sketch = self._release(meas, prepared.data, summary, description)
        sketch.privacy["plan"] = plan.options()
        return sketch

    def _share(self, share: Budget) -> Budget:
        """``share`` if this session accounts its kind (pure ε also in an (ε, δ) session), else
        a clear refusal."""
        if share.kind != self.budget and not (share.kind == "epsilon" and self.budget == "epsilon_delta"):
            raise ValueError(
                f"this session accounts {self._budget_words()}: give the release's share as such"
            )
        return share

    def _unit(self, name: str, value: Any) -> int:
        """``value`` if it is the dataset's privacy unit, else a clear refusal."""
        if isinstance(value, bool) or (
            isinstance(value, (int, float, np.integer, np.floating)) and not value > 0
        ):
            # a zero distance would make any measurement look free
            raise ValueError(f"{name} ({value!r}) must be a positive distance (the privacy unit)")
        if not isinstance(value, (int, float, np.integer, np.floating)) or value != self.contributions:
            raise ValueError(
                f"{name} ({value!r}) must be the privacy unit of dataset {self.dataset_id!r}: "
                f"contributions={self.contributions}, fixed when it was created; a release at another unit "
                "would be recorded with a loss that is not a loss of that unit"
            )
        return self.contributions

    def _budget_words(self) -> str:
        return {
            "epsilon": "pure ε (epsilon=)",
            "epsilon_delta": "(ε, δ) (epsilon=, delta=)",
            "rho": "ρ (rho=)",
        }[self.budget]

    def _release(self, meas: dp.Measurement, data: Any, summary: str, description: str | None) -> Any:
        """Filter, release, record, commit — all under the ledger's write lock, at the dataset's unit."""
        d_in = self.contributions
        try:
            expected = _as_loss(meas.map(d_in))
        except Exception as e:  # a privacy map that cannot be evaluated is an argument error
            raise ValueError(f"the measurement's privacy loss at d_in={d_in!r} is undefined ({e})") from None
        try:  # the input's kind, on the curator's side: refused here, nothing is spent
            with warnings.catch_warnings():  # OpenDP warns on a value of another type
                warnings.simplefilter("ignore")
                member = bool(meas.input_domain.member(data))
        except Exception:  # noqa: BLE001 - a value the domain cannot even test is not a member
            member = False
        if not member:
            raise ValueError(
                f"the data ({type(data).__name__}) is not a member of the measurement's input domain "
                f"({meas.input_domain}); nothing was released or spent"
            )
        # OpenDP 0.16's filter runs a query before comparing its loss with the budget, so the
        # budget is first put to a filter with a data-free stand-in of the same privacy map
        probe = dp.m.make_user_measurement(
            meas.input_domain, meas.input_metric, meas.output_measure, _nothing, meas.map
        )
        with self.ledger.transaction() as con:
            rec = self.ledger.dataset(self.dataset_id, con)
            if rec is None:  # the dataset row exists from open(); a deleted one is tampering
                raise LedgerError(f"dataset {self.dataset_id!r} vanished from the ledger {self.ledger.path}")
            d_out = self._opendp_form((float_down(rec.remaining[0]), float_down(rec.remaining[1])))
            gate = _privacy_filter(probe, data, d_in, d_out)
            try:
                gate(probe)
            except dp.OpenDPException:
                raise PrivacyBudgetError(
                    f"dataset {self.dataset_id!r}: the release needs {describe(self.budget, expected)}, but only "
                    f"{describe(self.budget, rec.remaining)} is left; the privacy filter refused it and nothing "
                    "was released or spent"
                ) from None
            queryable = _privacy_filter(meas, data, d_in, d_out)
            failed = False
            try:
                value = queryable(meas)
            except Exception:  # noqa: BLE001 - a failed computation is charged (below), never free
                failed = True
            release_id = self.ledger.next_release_id(con)
            if failed:
                # the filter accepted the loss and the data was read: a failure free of charge
                # would be a repeatable oracle (did this data make the computation fail?), so it
                # is recorded and spent like a release, and the error names nothing from the data
                self.ledger.record_release(
                    con,
                    rec,
                    "measurement",
                    d_in,
                    (Fraction(expected[0]), Fraction(expected[1])),
                    f"{summary} (failed: nothing released, loss charged)",
                    description,
                    None,
                    release_id=release_id,
                )
            else:
                loss = _as_loss(queryable.privacy_loss(d_in))
                is_sketch = isinstance(value, Sketch)
                stored = None
                if is_sketch:
                    # the loss at the session's unit replaces any the measurement recorded at d_in = 1
                    kept = {
                        k: v for k, v in value.privacy.items() if k not in ("loss", "epsilon", "delta", "rho")
                    }
                    value.privacy = {
                        **kept,
                        "measure": str(meas.output_measure),
                        "d_in": d_in,
                        **Budget(self.budget, None).record(self._opendp_form(loss)),  # type: ignore[arg-type]
                        "dataset_id": self.dataset_id,
                        "release_id": release_id,
                    }
                    witness = self.ledger.witness(self.dataset_id, rec.releases, rec.head)
                    if witness is not None:  # signed: where in the chain this release goes
                        value.privacy["ledger"] = witness
                    fm = value.feature_map
                    blob = sketch_to_bytes(value, key=self._key)
                    stored = (type(fm).__name__, fm.fingerprint(), fm.num_features, blob)
                self.ledger.record_release(
                    con,
                    rec,
                    "sketch" if is_sketch else "measurement",
                    d_in,
                    (Fraction(loss[0]), Fraction(loss[1])),
                    summary,
                    description,
                    None if is_sketch else _result_json(value),
                    release_id=release_id,
                    sketch=stored,
                )
        self.last_release_id = release_id
        if failed:
            raise ReleaseFailedError(
                f"release {release_id} of dataset {self.dataset_id!r} failed while computing; its privacy "
                f"loss ({describe(self.budget, expected)}) is charged, as the data was read. Check the data "
                "on the curator's side first (Schema.check; release_sketch checks before it builds anything)"
            ) from None
        return value

    # -- the store and the log ------------------------------------------------------------------
    def load_sketch(self, release_id: int) -> Sketch:
        """The sketch stored by release ``release_id`` of this dataset, read through the checked
        file format (no code is executed).

        :raises ValueError: if ``release_id`` is not a stored sketch of this dataset
        :raises SketchFormatError: if the stored bytes were modified, corrupted or replaced (they
            must be the bytes whose SHA-256 the release's chained row records)
        :raises LedgerError: if the dataset's hash chain shows tampering
        """
        if isinstance(release_id, bool) or not isinstance(release_id, (int, np.integer)):
            raise ValueError(f"release_id ({release_id!r}) must be an integer")
        self._record()  # the chain (and with a key its signatures) vouches for the recorded digest
        blob, digest = self.ledger.stored_sketch(self.dataset_id, int(release_id))
        name = f"{self.ledger.path}: sketch {int(release_id)}"
        sketch = sketch_from_bytes(blob, name)
        if hashlib.sha256(blob).hexdigest() != digest:
            raise SketchFormatError(
                f"{name}: the stored bytes are not those its release row records (replaced)"
            )
        return sketch

    def log_postprocessing(self, release_id: int, description: str) -> int:
        """Record an analysis of release ``release_id`` (post-processing: costs nothing).

        :return: the log entry's id
        :raises ValueError: for an unknown release or an empty description
        """
        if isinstance(release_id, bool) or not isinstance(release_id, (int, np.integer)):
            raise ValueError(f"release_id ({release_id!r}) must be an integer")
        if not isinstance(description, str) or not description:
            raise ValueError(f"description ({description!r}) must be a non-empty string")
        return self.ledger.log_postprocessing(self.dataset_id, int(release_id), description)

    def analyze(self, release_id: int, analysis: Callable[[Sketch], T], description: str | None = None) -> T:
        """Run ``analysis(sketch)`` on a stored sketch and log it as free post-processing.

        :param analysis: any function of the sketch (it never sees the data)
        :param description: what is logged (default: the function's qualified name)
        :return: what ``analysis`` returns
        """
        result = analysis(self.load_sketch(release_id))
        self.log_postprocessing(
            release_id, description or str(getattr(analysis, "__qualname__", repr(analysis)))
        )
        return result

    def releases(self) -> Any:
        """This dataset's releases as a Polars DataFrame: ``id``, ``kind``, ``time`` (UTC),
        ``d_in``, the loss (``epsilon``; ``epsilon`` and ``delta``; or ``rho``), ``summary`` (map
        and mechanism, or the measurement's input domain) and ``description``."""
        import polars as pl

        rows = self.ledger.query(
            "SELECT id, kind, created, d_in, loss, delta, summary, description FROM releases "
            "WHERE dataset_id = ? ORDER BY id",
            (self.dataset_id,),
        )
        cols: list[Any] = list(zip(*rows)) if rows else [[] for _ in range(8)]
        loss_cols = {"epsilon": ["epsilon"], "epsilon_delta": ["epsilon", "delta"], "rho": ["rho"]}[
            self.budget
        ]
        frame = pl.DataFrame(
            {
                "id": pl.Series(cols[0], dtype=pl.Int64),
                "kind": pl.Series(cols[1], dtype=pl.String),
                "time": pl.Series(cols[2], dtype=pl.String).str.to_datetime(time_zone="UTC"),
                "d_in": pl.Series(cols[3], dtype=pl.String),
                loss_cols[0]: pl.Series(cols[4], dtype=pl.Float64),
                "delta": pl.Series(cols[5], dtype=pl.Float64),
                "summary": pl.Series(cols[6], dtype=pl.String),
                "description": pl.Series(cols[7], dtype=pl.String),
            }
        )
        return frame if "delta" in loss_cols else frame.drop("delta")

    def postprocessing(self) -> Any:
        """The post-processing log as a Polars DataFrame: ``id``, ``release_id``, ``time``,
        ``description``."""
        import polars as pl

        rows = self.ledger.query(
            "SELECT p.id, p.release_id, p.created, p.description FROM postprocessing p "
            "JOIN releases r ON r.id = p.release_id WHERE r.dataset_id = ? ORDER BY p.id",
            (self.dataset_id,),
        )
        cols: list[Any] = list(zip(*rows)) if rows else [[] for _ in range(4)]
        return pl.DataFrame(
            {
                "id": pl.Series(cols[0], dtype=pl.Int64),
                "release_id": pl.Series(cols[1], dtype=pl.Int64),
                "time": pl.Series(cols[2], dtype=pl.String).str.to_datetime(time_zone="UTC"),
                "description": pl.Series(cols[3], dtype=pl.String),
            }
        )

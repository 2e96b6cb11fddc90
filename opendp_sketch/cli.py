"""The ``opendp-sketch`` command line: ``release`` (CSV/Parquet → sketch file), ``query`` (sketch
file → estimates), ``plot`` (sketch file → figure), ``inspect`` (what a sketch file holds) and
``demo`` (generated data).

Exit codes: 0 on success, 2 on a usage error or bad input (a message on stderr that never shows a
data value; nothing is released).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from tqdm import tqdm

from .demo import run_demo
from .schema import Boolean, Categorical

__all__ = ["main"]

_DESCRIPTION = (
    "Release a table once as a differentially private sketch, then answer analyses from it. "
    "Commands: release (CSV/Parquet -> sketch file), query (sketch file -> estimates), "
    "plot (sketch file -> figure), inspect (what a sketch file holds), demo (one sketch of generated "
    "data). Exit code 2 on bad input: "
    "the message never shows a data value, and nothing is released."
)


def _demo(args: argparse.Namespace) -> int:
    return run_demo(args.n, args.seed, args.epsilon, args.out)


def _inspect(args: argparse.Namespace) -> int:
    from .sketch import Sketch, SketchFormatError

    try:
        key = None if args.key_file is None else Path(args.key_file).read_bytes()
        sk = Sketch.load(args.path, key=key)
    except (SketchFormatError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    privacy = sk.privacy
    info = {
        "feature_map": sk.feature_map.to_dict(),
        "num_features": sk.feature_map.num_features,
        "count": sk.count,
        "noise": sk.noise,
        "privacy": privacy,
        # a merged sketch: how its parts compose (sequential unless declared disjoint) and the total
        "composition": privacy.get("composition", "single release"),
        "signature": "valid (HMAC-SHA256, --key-file)"
        if key is not None
        else "not checked (give --key-file)",
        "bounds": sk.bounds,
        "column_names": sk.column_names,
    }
    if sk.schema is not None:  # the public schema: each column's kind and range or labels
        info["schema"] = sk.schema
    print(json.dumps(info, indent=2, default=str))
    return 0


def _load_schema(args: argparse.Namespace) -> Any:
    """The ``--schema`` file (one JSON layout with the Python API; ``{"name": [lower, upper]}``
    still reads as numeric), with ``--impute`` filling numeric columns: ``--impute COL=V`` that
    column (over the file's rule), a bare ``--impute V`` every numeric column without a rule."""
    import opendp_sketch as dps

    schema = dps.Schema.from_json(args.schema)
    if not args.impute:
        return schema
    spec = schema.to_dict()
    every, per = _parse_impute(args.impute, spec["columns"])
    for name, col in spec["columns"].items():
        if col["type"] != "numeric" or (name not in per and (every is None or "impute" in col)):
            continue
        value = per.get(name, every)
        lo, hi = col["range"]
        if not lo <= value <= hi:
            if name in per:
                raise ValueError(
                    f"--impute {name}={value:g} is outside the public range [{lo}, {hi}] of column {name!r}"
                )
            raise ValueError(
                f"--impute {value:g} is outside the public range [{lo}, {hi}] of column {name!r}: a single "
                f"value fills every numeric column; give this one its own with --impute {name}=V "
                f"(V in [{lo}, {hi}])"
            )
        col["impute"] = value
    return dps.Schema.from_dict(spec)


def _parse_impute(texts: Sequence[str], columns: dict[str, Any]) -> tuple[float | None, dict[str, float]]:
    """``--impute`` values: at most one bare ``V`` (every numeric column) and ``COL=V`` per column.

    >>> _parse_impute(["0", "age=18"], {"age": {"type": "numeric"}, "x": {"type": "numeric"}})
    (0.0, {'age': 18.0})
    """
    every: float | None = None
    per: dict[str, float] = {}
    for text in texts:
        name, sep, raw = text.rpartition("=")
        name = name.strip()
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(
                f"--impute {text!r} must be a number V (every numeric column) or COL=V (one column)"
            )
        if not sep:
            if every is not None:
                raise ValueError(
                    "--impute V is given twice; give one value for every numeric column, and COL=V for the others"
                )
            every = value
            continue
        if name not in columns:
            raise ValueError(
                f"--impute {text!r}: column {name!r} is not in the schema (columns: {list(columns)})"
            )
        if columns[name]["type"] != "numeric":
            raise ValueError(
                f"--impute {text!r}: column {name!r} is {columns[name]['type']}; its missing values take a "
                'null rule in the schema file ("null": "category" or a label)'
            )
        if name in per:
            raise ValueError(f"--impute {name}=V is given twice")
        per[name] = value
    return every, per


def _feature_map(args: argparse.Namespace, schema: Any) -> Any:
    """The map on the schema's unit-free coordinates (numeric columns in [0, 1]), or None for auto."""
    import opendp_sketch as dps

    lo, hi = (b.tolist() for b in schema.bounds)
    d = len(schema)
    if args.map == "auto":
        return None
    if args.map == "rff":
        return dps.RFF(dim=d, num_features=args.features, bandwidth=args.bandwidth, seed=args.seed)
    if args.map == "kmeans":
        return dps.estimators.compressive_feature_map(
            (lo, hi), k=args.clusters, seed=args.seed, n=args.expected_rows
        )
    if args.map == "race":
        return dps.RACE(
            dim=d, rows=args.rows, buckets=args.buckets, bucket_width=args.bandwidth, seed=args.seed
        )
    if args.map == "histogram":
        return dps.Histogram(bounds=(lo, hi), bins=args.bins)
    if args.map == "dyadic":
        return dps.DyadicTrees(bounds=(lo, hi), levels=args.levels)
    center = [(a + b) / 2 for a, b in zip(lo, hi)]
    radius = args.radius or float(np.linalg.norm(np.subtract(hi, lo)) / 2)
    return dps.Moments(dim=d, radius=radius, center=center)


@contextlib.contextmanager
def _progress_bar(flag: bool | None, desc: str, **kwargs: Any) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback drawing a tqdm bar on stderr: shown when ``flag`` is
    True, or when it is None and stderr is a terminal (``--progress`` / ``--no-progress``)."""
    show = sys.stderr.isatty() if flag is None else flag
    with tqdm(file=sys.stderr, disable=not show, desc=desc, **kwargs) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        yield progress


def _release(args: argparse.Namespace) -> int:
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    schema = _load_schema(args)
    if args.expected_rows is not None:  # a public estimate, as if written in the schema file
        schema = dps.Schema.from_dict({**schema.to_dict(), "rows": args.expected_rows})
    out = Path(args.out)
    # checked before the release: a sketch that cannot be saved would spend the budget for nothing
    if out.is_dir() or not out.parent.is_dir() or not os.access(out.parent, os.W_OK):
        raise ValueError(
            f"--out {args.out}: cannot write a file there (a directory, or a missing or read-only folder)"
        )
    # an existing file is most likely an earlier release: overwriting it would spend budget again
    if out.exists() and not args.force:
        raise ValueError(
            f"--out {args.out} exists (an earlier release?); choose another path, or pass --force to replace it"
        )
    fm = _feature_map(args, schema)
    try:  # everything the release measures and spends, validated before the data is read
        plan = dps.Plan(
            schema,
            fm,
            epsilon=args.epsilon,
            delta=args.delta,
            rho=args.rho,
            pair_selection=args.pair_selection,
            pairs=args.pairs,
            rows_fraction=args.rows_fraction,
        )
    except ValueError as e:
        raise ValueError(_in_cli_words(str(e))) from None
    t0 = time.perf_counter()
    print(f"releasing {args.map} sketch of {args.data} (columns {schema.columns}) ...", file=sys.stderr)
    with _progress_bar(args.progress, "release pass", unit="rows", unit_scale=True) as progress:
        try:
            sk = dps.release_sketch(args.data, plan, progress=progress)
        except ValueError as e:
            raise ValueError(_in_cli_words(str(e))) from None
    sk.save(args.out)
    print(f"released in {time.perf_counter() - t0:.1f} s: {sk!r}", file=sys.stderr)
    print(json.dumps({"out": args.out, "count": sk.count, "privacy": sk.privacy}, default=str))
    return 0


#: Python keyword → the CLI flag that sets it, so errors name what the user can type
_FLAGS = {
    "impute value (Numeric(..., impute=v)) or null='category' / a label to read them as": (
        'impute value ("impute": v in the schema file, or --impute COL=v, or --impute v for every numeric column) or '
        '"null": "category" / a label to read them as'
    ),
    "drop feature_map= or pair_selection=": "use --map auto or drop --pair-selection",
    "drop feature_map= or pairs=": "use --map auto or drop --pairs",
    "rows_fraction counts the rows to plan the automatic map": "--rows-fraction counts the rows to plan the automatic map",
    "pairs='all' measures": "--pairs all measures",
    "so pair_selection has nothing": "so --pair-selection has nothing",
    "pair_selection chooses": "--pair-selection chooses",
    "pair_selection (": "--pair-selection (",
    "impute=<public value>": "--impute COL=<public value>",
    "impute=<public value(s)>": "--impute COL=<public value>",
    "impute=": "--impute ",
    "epsilon (optionally with delta) or rho": "--epsilon (optionally with --delta) or --rho",
    "data is empty (0 rows)": "the file has no rows (a header only?)",
}


def _in_cli_words(message: str) -> str:
    """A library error message with keyword names replaced by the CLI's flags."""
    for words, flag in _FLAGS.items():
        message = message.replace(words, flag)
    return message


def _pair_selection(text: str) -> float | str | None:
    """``--pair-selection``: ``auto``, ``none`` or a share of the budget."""
    if text in ("auto", "none"):
        return None if text == "none" else text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not auto, none or a share of the budget such as 0.1"
        ) from None


def _parse_points(text: str, where: str = "points") -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{where}: values ({text!r}) must be comma-separated numbers") from None
    if not values:
        raise ValueError(f"{where}: give at least one value after '='")
    return values


def _json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as ``None`` (JSON has no NaN or infinity).

    >>> _json_safe([{"value": float("nan"), "point": [1.0, float("inf")]}])
    [{'value': None, 'point': [1.0, None]}]
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _report(args: argparse.Namespace) -> int:
    """``opendp-sketch report FILE --out report.html``: the release as one page (post-processing)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError('report needs matplotlib: pip install -e ".[plot]"') from None
    from .report import write_report

    sk = _load_sketch(args.sketch)
    est = _decode(sk, args.sketch, args.n_samples, args.progress)
    t0 = time.perf_counter()
    path = write_report(sk, args.out, est, title=args.title)
    size = os.path.getsize(path)
    print(
        f"wrote {path} ({size / 1e6:.2f} MB, {len(est.columns)} column(s)) in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    return 0


def _schema_draft_command(args: argparse.Namespace) -> int:
    """``opendp-sketch schema DATA --out FILE``: a draft from the column list, to fill in."""
    from .schema import PLACEHOLDER, schema_draft

    if args.out.exists() and not args.force:
        raise ValueError(f"{args.out} exists; give --force to overwrite it")
    draft = schema_draft(args.data)
    args.out.write_text(json.dumps(draft, indent=2) + "\n", encoding="utf-8")
    todo = sum(json.dumps(c).count(PLACEHOLDER) for c in draft["columns"].values())
    print(
        f"wrote {args.out}: {len(draft['columns'])} column(s) from the file's column list (no value read); "
        f"fill in its {todo} '{PLACEHOLDER}' placeholder(s) from what you know, then: opendp-sketch release "
        f"{args.data} --schema {args.out} --epsilon 1 --out release.sketch",
        file=sys.stderr,
    )
    return 0


def _sketch_schema(sk: Any) -> Any:
    """The public schema a sketch file records, or None."""
    from .schema import Schema

    return None if sk.schema is None else Schema.from_dict(sk.schema)


def _column_names(sk: Any) -> list[str]:
    """The sketch's column names (``x0, x1, …`` when it records none)."""
    from .estimators.contract import default_column_names

    return list(sk.column_names) if sk.column_names else default_column_names(sk.feature_map)


def _check_column(name: str, names: Sequence[str], flag: str, usage: str | None = None) -> None:
    """Refuse a column the sketch does not have, naming its columns (or the flag's layout)."""
    if not name and usage is not None:
        raise ValueError(usage)
    if name not in names:
        raise ValueError(f"{flag}: column {name!r} is not in the sketch (columns: {list(names)})")


def _parse_kde_point(text: str, names: Sequence[str], schema: Any) -> tuple[list[Any], list[float]]:
    """A ``--kde`` point in the table's units and labels: ``(as given, encoded coordinates)``.
    With a schema each value is read by its column: a label of a categorical column, true/false
    (or 1/0) of a boolean one, a number otherwise; without one, numbers as the sketch's coordinates.

    >>> from opendp_sketch.schema import Schema
    >>> _parse_kde_point("40,South", ["age", "region"], Schema({"age": (0, 80), "region": ["North", "South"]}))
    ([40.0, 'South'], [0.5, 1.0])
    """
    values = [v.strip() for v in text.split(",")]
    if schema is None:
        numbers = _parse_points(text, f"--kde {text!r}")
        return list(numbers), numbers
    if len(values) != len(schema):
        raise ValueError(f"--kde {text!r} needs {len(schema)} values, one per column {schema.columns}")
    point: list[Any] = []
    coords: list[float] = []
    for name, raw in zip(schema.columns, values):
        col = schema[name]
        if isinstance(col, Categorical):
            if raw not in col.labels:
                raise ValueError(f"--kde {text!r}: value for {name!r} must be one of {list(col.labels)}")
            point.append(raw)
            coords.append(float(col.labels.index(raw)))
        elif isinstance(col, Boolean):
            flag = {"true": 1.0, "1": 1.0, "false": 0.0, "0": 0.0}.get(raw.lower())
            if flag is None:
                raise ValueError(f"--kde {text!r}: value for {name!r} must be true or false")
            point.append(bool(flag))
            coords.append(flag)
        else:
            try:
                number = float(raw)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                raise ValueError(f"--kde {text!r}: value for {name!r} must be a number")
            point.append(number)
            coords.append(float(schema.to_unit(name, [number])[0]))
    return point, coords


def _load_sketch(path: str) -> Any:
    from .sketch import Sketch, SketchFormatError

    try:
        return Sketch.load(path)
    except SketchFormatError as e:
        raise ValueError(
            f"{path} is not a sketch file ({e}); create one with: opendp-sketch release DATA --schema ... --out FILE"
        ) from None


def _decode(sk: Any, path: str, n_samples: int | None, show_progress: bool | None) -> Any:
    """M2M of ``sk``, saying on stderr what happens (stdout stays parseable) and warning on a bad fit."""
    from .estimators.m2m import M2M

    print(f"decoding {sk.sum.size:,} released values of {path} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with _progress_bar(show_progress, "decoder rounds", unit="round") as progress:
        est = M2M(sk, n_samples=n_samples, progress=progress)
    ratio = est.fit_ratio
    fit = f"; fit residual {ratio:.2f}× what the noise explains" if np.isfinite(ratio) else ""
    cached = getattr(getattr(est, "decoder", None), "from_cache_", False)
    how = "read the decoded sketch from the cache" if cached else "decoded"
    print(f"{how} in {time.perf_counter() - t0:.1f} s{fit}", file=sys.stderr)
    if np.isfinite(ratio) and ratio > 2:
        print(
            "warning: the decoder could not reconcile the released blocks (fit residual above twice the "
            "noise): answers deserve less trust than their intervals say",
            file=sys.stderr,
        )
    if est.degenerate:
        raise ValueError(f"this sketch cannot support estimates: {est.reason}")
    return est


def _decoder_progress_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar of the decoder's rounds on stderr (default: when stderr is a terminal)",
    )


def _plot(args: argparse.Namespace) -> int:
    """One panel per column of the decoded distribution, with the released cells' intervals."""
    if args.interval is not None and not 0 < args.interval < 1:
        raise ValueError(f"--interval ({args.interval}) must be a level in (0, 1), e.g. 0.95")
    if args.out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ValueError(f"--out ({args.out}) must end in .png, .svg or .pdf")
    sk = _load_sketch(args.sketch)
    from .estimators.contract import default_column_names

    names = list(sk.column_names) if sk.column_names else default_column_names(sk.feature_map)
    pairs = []
    for spec in args.pair or []:
        parts = [p.strip() for p in spec.split(",")]
        if len(parts) != 2 or parts[0] == parts[1]:
            raise ValueError(f"--pair ({spec!r}) must be two different columns: --pair A,B")
        pairs.append((parts[0], parts[1]))
    columns = args.columns or ([] if pairs else names)
    for c in [*columns, *(c for p in pairs for c in p)]:
        if c not in names:
            raise ValueError(f"column {c!r} is not in the sketch (columns: {names})")
    est = _decode(sk, args.sketch, args.n_samples, args.progress)
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - depends on the environment
        raise ValueError(
            'plotting needs matplotlib: pip install "opendp-sketch[plot]" (from a checkout: pip install -e ".[plot]")'
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(columns) + len(pairs)
    ncols = min(k, 3)
    nrows = -(-k // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.6 * nrows), squeeze=False)
    panels = list(axes.flat)
    for ax, c in zip(panels, columns):
        est.plot(c, interval=args.interval, ax=ax)
    for ax, (a, b) in zip(panels[len(columns) :], pairs):
        est.plot(a, b, ax=ax)
    for ax in list(axes.flat)[k:]:
        ax.set_visible(False)
    eps = sk.privacy.get("epsilon")
    spent = f"ε = {eps:g}" if isinstance(eps, (int, float)) else str(sk.privacy.get("measure", ""))
    fig.suptitle(f"{Path(args.sketch).name}: one release ({spent}); every panel is post-processing")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    print(f"wrote {args.out} ({len(columns)} column(s), {len(pairs)} pair(s))")
    return 0


def _query(args: argparse.Namespace) -> int:

    from .estimators.compressive import CompressiveKMeans
    from .estimators.kde import KDE
    from .estimators.queries import sql_predicate

    sk = _load_sketch(args.sketch)
    schema = _sketch_schema(sk)
    names = _column_names(sk)
    level = args.interval
    # every argument is checked on the file's public parts before the decoder runs
    if level is not None and not 0 < level < 1:
        raise ValueError(f"--interval ({level}) must be a level in (0, 1), e.g. 0.95")
    if not (args.mean or args.shares or args.group_mean or args.cdf or args.quantile or args.count):
        if not (args.kde or args.kmeans is not None):
            raise ValueError(
                "ask for at least one of --mean, --shares, --group-mean, --cdf, --quantile, --count, --kde, --kmeans"
            )
    for col in args.shares or []:
        _check_column(col, names, "--shares")
        if schema is None or schema[col].cardinality is None:
            raise ValueError(
                f"--shares {col}: shares need a categorical or boolean column of a schema sketch; "
                f"for a numeric column ask --cdf {col}=T1,T2 or --quantile {col}=0.5"
            )
    group_means = []
    for spec in args.group_mean or []:
        by, _, col = spec.partition("=")
        if not col:
            raise ValueError(f"--group-mean {spec!r} must be BY=COLUMN, e.g. sector=income")
        _check_column(by, names, "--group-mean")
        _check_column(col, names, "--group-mean")
        group_means.append((by, col))
    cdfs = []
    for spec in args.cdf or []:
        col, _, pts = spec.partition("=")
        _check_column(col, names, "--cdf", f"--cdf {spec!r} must be COL=T1,T2, e.g. age=30,40")
        if schema is not None and getattr(schema[col], "time", None):  # dates as ISO text
            try:
                points = schema.as_numbers(col, [p.strip() for p in pts.split(",")]).tolist()
            except ValueError as e:
                raise ValueError(f"--cdf {spec!r}: {e}") from None
        else:
            points = _parse_points(pts, f"--cdf {spec!r}")
        if any(math.isnan(t) for t in points):
            raise ValueError(f"--cdf {spec!r}: points must be numbers, not NaN")
        cdfs.append((col, points))
    quantiles = []
    for spec in args.quantile or []:
        col, _, qs = spec.partition("=")
        _check_column(col, names, "--quantile", f"--quantile {spec!r} must be COL=Q1,Q2, e.g. age=0.5")
        levels = _parse_points(qs, f"--quantile {spec!r}")
        if not all(0 <= q <= 1 for q in levels):
            raise ValueError(f"--quantile {spec!r}: levels must be in [0, 1], e.g. {col}=0.25,0.5,0.75")
        if schema is not None and isinstance(schema[col], Categorical):
            raise ValueError(
                f"--quantile {spec!r}: column {col!r} is categorical (its labels have no order); "
                f"ask --shares {col} for each label's share, or --count \"{col} = 'LABEL'\" for its rows"
            )
        quantiles.append((col, levels))
    counts = []
    for text in args.count or []:
        try:
            counts.append((text, sql_predicate(text, names, schema)))
        except ValueError as e:
            raise ValueError(f"--count: {e}") from None
    kdes = [_parse_kde_point(text, names, schema) for text in args.kde or []]

    rows: list[dict[str, object]] = []
    needs_m2m = args.mean or cdfs or quantiles or counts or args.shares or group_means
    est: Any = _decode(sk, args.sketch, args.n_samples, args.progress) if needs_m2m else None

    def answer(value: Any, i: int | None = None) -> dict[str, object]:
        """The value, and with --interval its bounds and whether a released block holds it."""
        pick = (lambda a: a) if i is None else (lambda a: a[i])  # noqa: E731

        def number(a: Any) -> Any:  # dates (quantiles of a date column) as ISO text
            v = pick(a)
            return str(v) if isinstance(v, np.datetime64) else float(v)

        if not hasattr(value, "low"):
            return {"value": number(value)}
        return {
            "value": number(value.value),
            "low": number(value.low),
            "high": number(value.high),
            "supported": bool(pick(value.supported)),
        }

    if args.mean:
        means = est.mean(interval=level) if level else est.mean()
        for j, (c, v) in enumerate(zip(est.columns, means.value if level else means)):
            if np.isfinite(v):  # categorical columns have shares, not means
                row = {"query": "mean", "column": c, "point": None, **answer(means, j)}
                if schema is not None and getattr(schema[c], "time", None):  # a mean date as a date
                    row.update(
                        {k: str(schema[c].as_time(row[k])) for k in ("value", "low", "high") if k in row}
                    )
                rows.append(row)
    for col in args.shares or []:
        for row in est.shares(col, interval=level).iter_rows(named=True):
            bounds = {k: row[k] for k in ("low", "high", "supported") if k in row}
            rows.append(
                {"query": "share", "column": col, "point": row[col], "value": float(row["share"]), **bounds}
            )
    for by, col in group_means:
        for row in est.group_mean(by, col, interval=level).iter_rows(named=True):
            label, share = row[by], row["share"]
            extra = {k: row[k] for k in ("low", "high", "supported") if k in row}
            rows.append(
                {
                    "query": "group_mean",
                    "column": f"{col} by {by}",
                    "point": label,
                    "value": float(row[col]),
                    **extra,
                }
            )
            _warn_if_group_is_noise(sk, f"{by}={'(null)' if label is None else label}", share)
    for col, points in cdfs:
        cdf = est.cdf(col, points, interval=level) if level else est.cdf(col, points)
        for i, t in enumerate(points):
            shown = (
                str(schema[col].as_time(t))
                if schema is not None and getattr(schema[col], "time", None)
                else t
            )
            rows.append({"query": "cdf", "column": col, "point": shown, **answer(cdf, i)})
    for col, levels in quantiles:
        quant = est.quantile(col, levels, interval=level) if level else est.quantile(col, levels)
        for i, q in enumerate(levels):
            rows.append({"query": "quantile", "column": col, "point": q, **answer(quant, i)})
    for text, expr in counts:
        count = est.count(expr, interval=level) if level else est.count(expr)
        rows.append({"query": "count", "column": text, "point": None, **answer(count)})
    for point, coords in kdes:
        kde = KDE(sk)
        query = [point] if kde.schema_ is not None else [coords]  # a schema sketch reads the table's units
        rows.append({"query": "kde", "column": None, "point": point, "value": float(kde(query)[0])})
    if args.kmeans is not None:
        km = CompressiveKMeans(args.kmeans, n_restarts=args.restarts).fit(sk)
        centres = km.cluster_centers_
        if schema is not None:  # centres in the table's units and labels
            centres = schema.decode(centres).rows()
        for j, (c, w) in enumerate(zip(centres, km.weights_)):
            rows.append({"query": "kmeans", "column": f"cluster {j}", "point": list(c), "value": float(w)})
    keys = list(dict.fromkeys(k for r in rows for k in r))
    rows = [{k: r.get(k) for k in keys} for r in rows]
    if args.format == "json":  # valid JSON: a NaN (no answer) is null
        print(json.dumps(_json_safe(rows), allow_nan=False))
    elif args.format == "csv":
        print(
            pl.DataFrame(
                {k: [str(r[k]) if r[k] is not None else "" for r in rows] for k in rows[0]}
            ).write_csv(),
            end="",
        )
    else:
        for r in rows:
            labelled = r["query"] in ("share", "group_mean")  # a None label is the null category
            where = f" at {r['point']}" if r["point"] is not None else " at (null)" if labelled else ""
            band = f"  [{_shown(r['low'])}, {_shown(r['high'])}]" if r.get("low") is not None else ""
            flag = "  (not supported: a bound)" if r.get("supported") is False else ""
            print(f"{r['query']:>10} {r['column'] or '':<24}{where}: {_shown(r['value'])}{band}{flag}")
        if any(r.get("supported") is False for r in rows):
            print(
                "not supported: no released block holds this answer (e.g. columns whose joint marginal "
                "was not measured, or an edge inside a bin); its interval is the range the released "
                "cells allow, and the value is the decoder's guess within it",
                file=sys.stderr,
            )
    return 0


def _shown(value: Any) -> str:
    """An answer as printed: numbers to 6 significant digits, dates as they are."""
    return f"{value:.6g}" if isinstance(value, (int, float)) else str(value)


def _warn_if_group_is_noise(sk: Any, group: str, share: float) -> None:
    """A warning line on stderr when a group's estimated rows are within 3 noise standard
    deviations of one released cell (one-hot maps: a cell counts rows), so its mean is mostly
    noise. Public: the share is an answer, the noise law is recorded in the sketch. In a weighted
    composite of cell maps a cell of weight ``a`` counts rows with noise ``σ/a``: the least noisy
    block is the one read."""
    from .estimators.intervals import partitions

    parts = partitions(sk.feature_map)
    if not parts or sk.sum_variance <= 0:
        return
    rows, sd = share * sk.n_hat, math.sqrt(sk.sum_variance) / max(a for _, _, a in parts)
    if rows < 3 * sd:
        print(
            f"warning: group {group} holds about {rows:,.0f} rows, within 3 noise standard deviations "
            f"of a released cell (±{sd:,.0f} rows): its mean is not supported by this sketch",
            file=sys.stderr,
        )


class _DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default unless it has none (``None``) or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``opendp-sketch``."""
    parser = argparse.ArgumentParser(prog="opendp-sketch", description=_DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = _DefaultsShown
    p_demo = sub.add_parser(
        "demo", help="release one sketch of generated data and print estimates", formatter_class=fmt
    )
    p_demo.add_argument("--n", type=int, default=200_000, help="rows to generate")
    p_demo.add_argument("--epsilon", type=float, default=1.0, help="total privacy budget ε")
    p_demo.add_argument("--seed", type=int, default=0, help="seed of the data and the public maps")
    p_demo.add_argument("--out", help="directory to save the released sketch in (as demo.sketch)")
    p_demo.set_defaults(func=_demo)
    p_insp = sub.add_parser(
        "inspect", help="show what a sketch file holds and its privacy parameters", formatter_class=fmt
    )
    p_insp.add_argument("path", help="a file written by Sketch.save")
    p_insp.add_argument(
        "--key-file", help="file holding the curator's secret key: the sketch must carry a matching signature"
    )
    p_insp.set_defaults(func=_inspect)

    p_schema = sub.add_parser(
        "schema",
        help="draft a schema file from a table file's column list (no value is read)",
        formatter_class=fmt,
    )
    p_schema.add_argument("data", help="a .csv, .parquet or .ipc file")
    p_schema.add_argument("--out", type=Path, required=True, help="the schema file to write (JSON)")
    p_schema.add_argument("--force", action="store_true", help="overwrite an existing file")
    p_schema.set_defaults(func=_schema_draft_command)

    p_rel = sub.add_parser(
        "release",
        help="release a sketch of a CSV/Parquet file (streamed) to a sketch file",
        formatter_class=fmt,
    )
    p_rel.add_argument("data", help="a .csv, .parquet or .ipc file")
    p_rel.add_argument(
        "--schema",
        required=True,
        help='JSON file: {"columns": {"age": {"type": "numeric", "range": [18, 90]}, "sex": {"type": "categorical", '
        '"labels": ["F", "M"], "null": "category"}, ...}} (also {"name": [lower, upper]}); see docs/schema.md',
    )
    p_rel.add_argument("--out", required=True, help="where to write the sketch (an existing file is refused)")
    p_rel.add_argument(
        "--force", action="store_true", help="replace an existing --out file (spends the budget again)"
    )
    p_rel.add_argument(
        "--map",
        choices=["auto", "rff", "race", "histogram", "dyadic", "moments", "kmeans"],
        default="auto",
        help="feature map on the schema's unit-free coordinates (numeric columns scaled to [0, 1] by their "
        "public ranges); auto: chosen from the schema (1-way and 2-way marginals); kmeans: an RFF map sized "
        "for --clusters",
    )
    p_rel.add_argument("--clusters", type=int, default=10, help="clusters planned with --map kmeans")
    p_rel.add_argument(
        "--expected-rows",
        type=int,
        metavar="N",
        help='a public estimate of the row count (never read from the data; the schema\'s "rows"): '
        "--map auto then measures 2-way marginals at 16 bins where the noise allows and leaves them out "
        "where it does not, and with --map kmeans "
        "each row evaluates only the frequencies the estimate allows; a wrong guess costs accuracy, "
        "not privacy",
    )
    p_rel.add_argument(
        "--pair-selection",
        type=_pair_selection,
        default="auto",
        metavar="SHARE",
        help="with --map auto: spend this share of the budget (e.g. 0.1) choosing, from the data, the 2-way "
        "marginals that join the columns the rule leaves apart (MST's private selection; see docs/release.md). "
        "auto (default): 0.1 where --expected-rows says the chosen pairs' cells stand above the noise; "
        "none: never",
    )
    p_rel.add_argument(
        "--rows-fraction",
        type=float,
        metavar="SHARE",
        help="with --map auto and no --expected-rows (nor schema rows): the share of the budget spent first on a "
        "noisy row count that plans the map (default 0.03; 0: plan without a row estimate)",
    )
    p_rel.add_argument(
        "--pairs",
        choices=["rule", "all", "none"],
        default="rule",
        help="with --map auto: which 2-way marginals to measure. rule (default): where --expected-rows says "
        "an average cell stands above the noise; all: every pair (for regression and classifiers, which read "
        "how the columns vary together, at some cost to counts); none: 1-way marginals only",
    )
    p_rel.add_argument("--epsilon", type=float, help="ε (with --delta: Gaussian noise)")
    p_rel.add_argument("--delta", type=float, help="δ")
    p_rel.add_argument("--rho", type=float, help="ρ for zCDP (instead of ε)")
    p_rel.add_argument("--features", type=int, default=1000, help="RFF features")
    p_rel.add_argument(
        "--bandwidth",
        type=float,
        default=0.2,
        help="RFF bandwidth / RACE bucket width, in units of each column's range",
    )
    p_rel.add_argument("--rows", type=int, default=100, help="RACE rows")
    p_rel.add_argument("--buckets", type=int, default=1000, help="RACE buckets per row")
    p_rel.add_argument("--bins", type=int, default=64, help="Histogram bins per column")
    p_rel.add_argument("--levels", type=int, default=10, help="DyadicTrees levels")
    p_rel.add_argument("--radius", type=float, help="Moments radius (default: the box's half-diagonal)")
    p_rel.add_argument("--seed", type=int, default=0, help="seed of the public map")
    p_rel.add_argument(
        "--impute",
        action="append",
        metavar="[COL=]V",
        help="public value replacing missing numeric values: COL=V for one column (repeatable; inside "
        "its range), or a single V for every numeric column without a rule (inside each range)",
    )
    p_rel.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar of the release pass on stderr (default: when stderr is a terminal)",
    )
    p_rel.set_defaults(func=_release)

    p_q = sub.add_parser(
        "query", help="estimates from a sketch file, as a table, JSON or CSV", formatter_class=fmt
    )
    p_q.add_argument("sketch", help="a file written by release or Sketch.save")
    p_q.add_argument("--mean", action="store_true", help="column means (M2M)")
    p_q.add_argument(
        "--shares", action="append", metavar="COL", help="share of each label of a categorical column"
    )
    p_q.add_argument(
        "--group-mean", action="append", metavar="BY=COL", help="mean of COL within each label of BY"
    )
    p_q.add_argument(
        "--cdf",
        action="append",
        metavar="COL=T1,T2",
        help="CDF of a column at points (0 below its public range, 1 above)",
    )
    p_q.add_argument("--quantile", action="append", metavar="COL=Q1,Q2", help="quantiles of a numeric column")
    p_q.add_argument(
        "--count",
        action="append",
        metavar="SQL",
        help="rows satisfying a predicate, e.g. \"age > 30 AND sex = 'F'\" (labels are checked against the schema)",
    )
    p_q.add_argument(
        "--kde",
        action="append",
        metavar="X1,X2,...",
        help="kernel density at a point, one value per column: a label for a categorical column, "
        "a number otherwise (RFF/RACE)",
    )
    p_q.add_argument(
        "--kmeans", type=int, metavar="K", help="K cluster centres (value: cluster weight; RFF sketches)"
    )
    p_q.add_argument("--restarts", type=int, default=3, help="compressive k-means restarts")
    p_q.add_argument(
        "--n-samples", type=int, help="M2M points (default: 30 000 synthetic points; 100 000 for ridge)"
    )
    p_q.add_argument(
        "--interval",
        type=float,
        metavar="LEVEL",
        help="bounds at this level (e.g. 0.95) for --mean, --shares, --group-mean, --cdf, --quantile and --count from the "
        "released cells (each holds its value); "
        "answers no released block holds are flagged (marginal and histogram sketches)",
    )
    p_q.add_argument("--format", choices=["table", "json", "csv"], default="table")
    _decoder_progress_option(p_q)
    p_q.set_defaults(func=_query)

    p_plot = sub.add_parser(
        "plot",
        help="draw columns of a sketch's decoded distribution, with intervals, into an image",
        formatter_class=fmt,
    )
    p_plot.add_argument("sketch", help="a file written by release or Sketch.save")
    p_plot.add_argument(
        "columns", nargs="*", help="columns to draw (default: every column, unless --pair is given)"
    )
    p_plot.add_argument(
        "--pair", action="append", metavar="A,B", help="a heat map of two columns' joint shares (repeatable)"
    )
    p_plot.add_argument(
        "--out", type=Path, default=Path("sketch.png"), help="image file (.png, .svg or .pdf)"
    )
    p_plot.add_argument(
        "--interval",
        type=float,
        default=0.95,
        metavar="LEVEL",
        help="level of the intervals drawn from the released cells",
    )
    p_plot.add_argument("--n-samples", type=int, help="M2M points (default: 30 000 synthetic points)")
    p_rep = sub.add_parser(
        "report",
        help="write one self-contained HTML page of a sketch: every column, the relations, the privacy record",
        formatter_class=fmt,
    )
    p_rep.add_argument("sketch", help="a file written by release or Sketch.save")
    p_rep.add_argument("--out", type=Path, default=Path("report.html"), help="the HTML file to write")
    p_rep.add_argument("--title", help="the page's title")
    p_rep.add_argument("--n-samples", type=int, help="M2M points (default: 30 000 synthetic points)")
    _decoder_progress_option(p_rep)
    p_rep.set_defaults(func=_report)
    _decoder_progress_option(p_plot)
    p_plot.set_defaults(func=_plot)

    args = parser.parse_args(argv)
    if args.command == "demo" and (args.n <= 0 or args.epsilon <= 0):
        parser.error("--n and --epsilon must be positive")
    try:
        return int(args.func(args))
    except ValueError as e:  # bad input: a clear message, nothing released
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

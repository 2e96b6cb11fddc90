"""``Sketch``: save/load round trips, refusal of malformed files, merging."""

from __future__ import annotations

import io
import json
import pickle
import sys
import zipfile

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.sketch import FORMAT, FORMAT_VERSION, _digest

ALL_MAPS = {
    "RFF": lambda: dps.RFF(dim=3, num_features=10, bandwidth=0.7, seed=1),
    "RFF-laplacian": lambda: dps.RFF(dim=2, num_features=6, bandwidth=2.0, kernel="laplacian", seed=4),
    "QuantizedRFF": lambda: dps.QuantizedRFF(dim=3, num_features=12, bandwidth=0.5, seed=2),
    "RACE-l2": lambda: dps.RACE(dim=3, rows=4, buckets=7, bucket_width=0.8, seed=3),
    "RACE-srp": lambda: dps.RACE(dim=3, rows=3, buckets=8, family="srp", seed=5),
    "Histogram": lambda: dps.Histogram(bounds=([0, -1, 2], [1, 1, 5]), bins=[3, 2, 4]),
    "DyadicTrees": lambda: dps.DyadicTrees(bounds=(0.0, 1.0), levels=3, dim=3),
    "Moments": lambda: dps.Moments(dim=3, radius=2.5, center=[0.5, -0.25, 1.0]),
    "RandomQuadratic": lambda: dps.RandomQuadratic(dim=3, num_features=9, radius=1.5, seed=6),
    "ByClass-RFF": lambda: dps.ByClass(dps.RFF(dim=3, num_features=4, seed=7), num_classes=3),
    "ByClass-Histogram": lambda: dps.ByClass(dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=3), num_classes=2),
}


def _sketch(fm: dps.FeatureMap, seed: int = 0, **kwargs) -> dps.Sketch:
    rng = np.random.default_rng(seed)
    d = fm.input_dim
    defaults = dict(
        sum_units=rng.integers(-(2**40), 2**40, fm.num_features),
        count=int(rng.integers(1, 10**6)),
        noise={
            "mechanism": "laplace",
            "sum_scale": 0.1 + seed,
            "count_scale": 51.0,
            "sum_variance": 2.5,
            "count_variance": 5000.5,
            "count_fraction": 0.02,
        },
        privacy={"measure": "MaxDivergence", "d_in": 1, "epsilon": 0.999999},
        bounds=([-1.0 - i for i in range(d)], [1.0 + 0.5 * i for i in range(d)]),
        column_names=[f"col{i}" for i in range(d)],
    )
    defaults.update(kwargs)
    return dps.Sketch(feature_map=fm, **defaults)


def _assert_same(a: dps.Sketch, b: dps.Sketch) -> None:
    assert type(a.feature_map) is type(b.feature_map)
    assert a.feature_map == b.feature_map
    assert a.feature_map.to_dict() == b.feature_map.to_dict()
    assert a.sum_units.dtype == np.int64 and b.sum_units.dtype == np.int64
    assert np.array_equal(a.sum_units, b.sum_units)
    assert a.count == b.count
    assert a.noise == b.noise
    assert a.privacy == b.privacy
    assert a.bounds == b.bounds
    assert a.column_names == b.column_names


# -- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(ALL_MAPS))
def test_round_trip_every_feature_map(tmp_path, kind):
    fm = ALL_MAPS[kind]()
    sk = _sketch(fm, seed=len(kind))
    path = tmp_path / f"{kind}.sketch"
    sk.save(path)
    loaded = dps.Sketch.load(path)
    _assert_same(sk, loaded)
    # the regenerated map evaluates identically (same public random draws)
    X = np.random.default_rng(1).uniform(-1, 1, size=(5, fm.input_dim))
    assert np.array_equal(fm.transform(X), loaded.feature_map.transform(X))
    assert np.array_equal(fm.fixed_features(X), loaded.feature_map.fixed_features(X))
    assert loaded.feature_map.sensitivity(1) == fm.sensitivity(1)
    assert np.array_equal(loaded.mean, sk.mean)


def test_round_trip_optional_fields_none(tmp_path):
    sk = dps.Sketch(
        feature_map=ALL_MAPS["Histogram"](), sum_units=np.array([1, -2, 3, 0, 5, 6, 7, 8, 9]), count=-3
    )
    sk.save(str(tmp_path / "a.npz"))
    loaded = dps.Sketch.load(str(tmp_path / "a.npz"))
    _assert_same(sk, loaded)
    assert loaded.bounds is None and loaded.column_names is None
    assert loaded.noise == {} and loaded.privacy == {}


def test_round_trip_of_a_real_release(tmp_path, data2d, rff2d):
    sk = dps.release_sketch(data2d, rff2d, bounds=(0.0, 1.0), rho=0.5, column_names=["u", "v"])
    sk.save(tmp_path / "r.npz")
    _assert_same(sk, dps.Sketch.load(tmp_path / "r.npz"))


def test_round_trip_of_a_merged_sketch(tmp_path):
    fm = ALL_MAPS["RACE-l2"]()
    merged = _sketch(fm, 1).merge(_sketch(fm, 2))
    merged.save(tmp_path / "m.npz")
    _assert_same(merged, dps.Sketch.load(tmp_path / "m.npz"))


# -- malformed files -------------------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path):
    """(path, sketch, raw bytes) of a saved sketch."""
    sk = _sketch(ALL_MAPS["RFF"](), seed=3)
    path = tmp_path / "good.npz"
    sk.save(path)
    return path, sk, path.read_bytes()


def _read_entries(raw: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _write(
    path,
    meta: dict,
    sum_units,
    *,
    checksum: bool = True,
    extra: dict | None = None,
    drop: tuple[str, ...] = (),
) -> None:
    """Write a sketch-shaped npz with an arbitrary header (valid checksum unless told otherwise)."""
    meta = dict(meta)
    if checksum:
        meta["sha256"] = _digest(meta, np.asarray(sum_units))
    entries = {
        "meta": np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8),
        "sum_units": sum_units,
        **(extra or {}),
    }
    for name in drop:
        entries.pop(name)
    np.savez_compressed(path, **entries)


def _load_fails(path, match: str) -> dps.SketchFormatError:
    with pytest.raises(dps.SketchFormatError, match=match) as info:
        dps.Sketch.load(path)
    return info.value


def test_load_valid_crafted_file(tmp_path, saved):
    """Control: the crafting helper writes loadable files, so the failures below are real."""
    _, sk, _ = saved
    _write(tmp_path / "ok.npz", sk.to_dict(), sk.sum_units)
    _assert_same(sk, dps.Sketch.load(tmp_path / "ok.npz"))


def test_truncated_file(tmp_path, saved):
    _, _, raw = saved
    cut = tmp_path / "cut.npz"
    for n in [0, 1, 10, len(raw) // 3, len(raw) // 2, len(raw) - 22, len(raw) - 1]:
        cut.write_bytes(raw[:n])
        _load_fails(cut, r"not a readable sketch file")


def test_every_truncation(tmp_path, saved):
    _, _, raw = saved
    cut = tmp_path / "cut.npz"
    for n in range(len(raw)):
        cut.write_bytes(raw[:n])
        with pytest.raises(dps.SketchFormatError):
            dps.Sketch.load(cut)


def _compressed_ranges(raw: bytes) -> dict[str, tuple[int, int]]:
    """Byte range of each entry's compressed data inside the zip."""
    out = {}
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        for info in zf.infolist():
            head = raw[info.header_offset : info.header_offset + 30]
            start = (
                info.header_offset
                + 30
                + int.from_bytes(head[26:28], "little")
                + int.from_bytes(head[28:30], "little")
            )
            out[info.filename] = (start, start + info.compress_size)
    return out


@pytest.mark.parametrize("entry", ["meta.npy", "sum_units.npy"])
def test_flipped_byte_in_middle_of_entry(tmp_path, saved, entry):
    _, _, raw = saved
    start, stop = _compressed_ranges(raw)[entry]
    bad = bytearray(raw)
    bad[(start + stop) // 2] ^= 0xFF
    (tmp_path / "flip.npz").write_bytes(bytes(bad))
    _load_fails(tmp_path / "flip.npz", "not a readable sketch file")


@pytest.mark.parametrize("entry", ["meta.npy", "sum_units.npy"])
def test_flipped_first_byte_of_compressed_entry(tmp_path, saved, entry):
    """A corrupt deflate stream (zlib.error) must also be a SketchFormatError."""
    _, _, raw = saved
    start, _ = _compressed_ranges(raw)[entry]
    bad = bytearray(raw)
    bad[start] ^= 0xFF
    (tmp_path / "flip.npz").write_bytes(bytes(bad))
    _load_fails(tmp_path / "flip.npz", "not a readable sketch file")


def test_every_single_byte_flip_is_refused_or_harmless(tmp_path, saved):
    """Flipping any one byte either gives SketchFormatError or (zip metadata nobody reads, e.g.
    timestamps) loads the very same sketch. Never another exception, never a different sketch."""
    _, sk, raw = saved
    path = tmp_path / "flip.npz"
    other = {}
    for i in range(len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 0xFF
        path.write_bytes(bytes(bad))
        try:
            loaded = dps.Sketch.load(path)
        except dps.SketchFormatError:
            continue
        except Exception as e:  # noqa: BLE001 - collected and reported below
            other.setdefault(f"{type(e).__module__}.{type(e).__name__}", i)
            continue
        _assert_same(sk, loaded)
    assert not other, f"exceptions other than SketchFormatError (type: first offset): {other}"


def test_edited_count_fails_checksum(tmp_path, saved):
    _, sk, raw = saved
    entries = _read_entries(raw)
    meta = json.loads(entries["meta"].tobytes().decode())
    meta["count"] += 1  # keeps the old sha256
    _write(tmp_path / "edit.npz", meta, entries["sum_units"], checksum=False)
    _load_fails(tmp_path / "edit.npz", "checksum mismatch; the file was modified or corrupted$")


def test_edited_sum_fails_checksum(tmp_path, saved):
    _, sk, raw = saved
    entries = _read_entries(raw)
    meta = json.loads(entries["meta"].tobytes().decode())
    su = entries["sum_units"].copy()
    su[0] += 1
    _write(tmp_path / "edit.npz", meta, su, checksum=False)
    _load_fails(tmp_path / "edit.npz", "checksum mismatch")


def test_wrong_version(tmp_path, saved):
    _, sk, _ = saved
    meta = sk.to_dict()
    meta["version"] = FORMAT_VERSION + 1
    _write(tmp_path / "v.npz", meta, sk.sum_units)
    _load_fails(
        tmp_path / "v.npz",
        rf"format version {FORMAT_VERSION + 1} is not supported \(expected {FORMAT_VERSION}\)$",
    )
    meta["version"] = None
    _write(tmp_path / "v.npz", meta, sk.sum_units)
    _load_fails(tmp_path / "v.npz", r"format version None is not supported")


@pytest.mark.parametrize("fmt", ["opendp_sketch.Other", "", None])
def test_wrong_format_string(tmp_path, saved, fmt):
    _, sk, _ = saved
    meta = sk.to_dict()
    meta["format"] = fmt
    _write(tmp_path / "f.npz", meta, sk.sum_units)
    _load_fails(tmp_path / "f.npz", rf"not an {FORMAT} file$")


def test_header_not_a_dict(tmp_path, saved):
    _, sk, _ = saved
    np.savez_compressed(
        tmp_path / "l.npz", meta=np.frombuffer(b"[1, 2]", dtype=np.uint8), sum_units=sk.sum_units
    )
    _load_fails(tmp_path / "l.npz", rf"not an {FORMAT} file$")


@pytest.mark.parametrize("payload", [b"{not json", b"\xff\xfe\x00", b""], ids=["json", "utf8", "empty"])
def test_header_not_json(tmp_path, saved, payload):
    _, sk, _ = saved
    np.savez_compressed(
        tmp_path / "j.npz", meta=np.frombuffer(payload, dtype=np.uint8), sum_units=sk.sum_units
    )
    _load_fails(tmp_path / "j.npz", "not a readable sketch file")


def test_extra_entry(tmp_path, saved):
    _, sk, _ = saved
    _write(tmp_path / "x.npz", sk.to_dict(), sk.sum_units, extra={"extra": np.zeros(2)})
    _load_fails(
        tmp_path / "x.npz", r"expected entries meta and sum_units, found \['extra', 'meta', 'sum_units'\]$"
    )


@pytest.mark.parametrize("drop,found", [("sum_units", "['meta']"), ("meta", "['sum_units']")])
def test_missing_entry(tmp_path, saved, drop, found):
    _, sk, _ = saved
    _write(tmp_path / "m.npz", sk.to_dict(), sk.sum_units, drop=(drop,))
    _load_fails(
        tmp_path / "m.npz",
        r"expected entries meta and sum_units, found " + found.replace("[", r"\[").replace("]", r"\]"),
    )


@pytest.mark.parametrize(
    "sum_units",
    [
        np.arange(10, dtype=np.float64),
        np.arange(10, dtype=np.int32),
        np.arange(10, dtype=">i8"),
        np.zeros((2, 5), dtype=np.int64),
    ],
    ids=["float", "int32", "big-endian", "2-D"],
)
def test_sum_units_wrong_type(tmp_path, saved, sum_units):
    _, sk, _ = saved
    _write(tmp_path / "s.npz", sk.to_dict(), sum_units)
    _load_fails(tmp_path / "s.npz", "sum_units must be a 1-D int64 array$")


def test_sum_units_wrong_length(tmp_path, saved):
    _, sk, _ = saved
    _write(tmp_path / "s.npz", sk.to_dict(), np.arange(11, dtype=np.int64))
    _load_fails(tmp_path / "s.npz", "invalid sketch contents: sum_units must be 10 integers")


def test_unknown_feature_map_kind(tmp_path, saved):
    _, sk, _ = saved
    meta = sk.to_dict()
    meta["feature_map"]["kind"] = "Evil"
    _write(tmp_path / "k.npz", meta, sk.sum_units)
    _load_fails(tmp_path / "k.npz", r"invalid sketch contents: feature map kind \('Evil'\) must be one of")


def test_feature_map_fingerprint_mismatch(tmp_path, saved):
    _, sk, _ = saved
    meta = sk.to_dict()
    meta["feature_map"]["params"]["seed"] = 99  # other draws than the stored fingerprint
    _write(tmp_path / "fp.npz", meta, sk.sum_units)
    _load_fails(
        tmp_path / "fp.npz",
        "invalid sketch contents: feature map RFF regenerated from its seed does not match",
    )


@pytest.mark.parametrize(
    "field,value",
    [
        ("count", None),
        ("count", float("inf")),
        ("count", float("nan")),
        ("count", 1.5),
        ("count", "12"),
        ("count", [3]),
        ("privacy", 3),
        ("noise", [1, 2]),
        ("bounds", 7),
        ("bounds", [[0, 0, 0], [1, 1, 1], [2, 2, 2]]),
        ("column_names", "abc"),
        ("feature_map", None),
    ],
    ids=lambda v: str(v).replace(" ", "")[:16],
)
def test_malformed_header_field(tmp_path, saved, field, value):
    """A header that passes the checksum but breaks the schema is a SketchFormatError, never
    another exception and never a silently altered sketch."""
    _, sk, _ = saved
    meta = sk.to_dict()
    meta[field] = value
    _write(tmp_path / "h.npz", meta, sk.sum_units)
    _load_fails(tmp_path / "h.npz", "invalid sketch contents")


def test_not_a_zip(tmp_path):
    (tmp_path / "t.npz").write_text("hello, this is not a sketch\n")
    _load_fails(tmp_path / "t.npz", "not a readable sketch file")
    (tmp_path / "e.npz").write_bytes(b"")
    _load_fails(tmp_path / "e.npz", "not a readable sketch file")


def test_missing_file_and_directory(tmp_path):
    _load_fails(tmp_path / "nope.npz", "not a readable sketch file")
    _load_fails(tmp_path, "not a readable sketch file")


def test_plain_npy_file(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(10, dtype=np.int64))
    _load_fails(tmp_path / "a.npy", "not a readable sketch file")


class _Payload:
    """Unpickling this sets ``sys._opendp_sketch_unpickled`` (a harmless canary)."""

    def __reduce__(self):
        return (exec, ("import sys; sys._opendp_sketch_unpickled = True",))


@pytest.fixture
def canary():
    sys.__dict__.pop("_opendp_sketch_unpickled", None)
    yield
    assert not getattr(sys, "_opendp_sketch_unpickled", False), "a pickle was unpickled"
    sys.__dict__.pop("_opendp_sketch_unpickled", None)


def test_canary_works(canary):
    pickle.loads(pickle.dumps(_Payload()))
    assert sys._opendp_sketch_unpickled is True
    del sys._opendp_sketch_unpickled


def test_pickle_file_is_never_unpickled(tmp_path, canary):
    (tmp_path / "p.npz").write_bytes(pickle.dumps({"sketch": _Payload()}))
    _load_fails(tmp_path / "p.npz", "not a readable sketch file")


def test_object_array_npz_is_never_unpickled(tmp_path, saved, canary):
    _, sk, _ = saved
    meta = sk.to_dict()
    meta["sha256"] = "0" * 64
    obj = np.empty(1, dtype=object)
    obj[0] = _Payload()
    np.savez(tmp_path / "o.npz", meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), sum_units=obj)
    _load_fails(tmp_path / "o.npz", "not a readable sketch file")


def test_object_array_npy_is_never_unpickled(tmp_path, canary):
    obj = np.empty(1, dtype=object)
    obj[0] = _Payload()
    np.save(tmp_path / "o.npy", obj, allow_pickle=True)
    with pytest.raises(dps.SketchFormatError):
        dps.Sketch.load(tmp_path / "o.npy")


def test_load_calls_np_load_without_pickle(saved, monkeypatch):
    path, sk, _ = saved
    seen = []
    original = np.load

    def spy(*args, **kwargs):
        seen.append(kwargs.get("allow_pickle", "default"))
        return original(*args, **kwargs)

    monkeypatch.setattr(np, "load", spy)
    dps.Sketch.load(path)
    assert seen == [False]


# -- merge ---------------------------------------------------------------------------------------


def test_merge_adds(tmp_path):
    fm = ALL_MAPS["RFF"]()
    a = _sketch(fm, 1)
    b = _sketch(fm, 2)
    m = a.merge(b)
    assert m.feature_map == fm
    assert np.array_equal(m.sum_units, a.sum_units + b.sum_units)
    assert m.count == a.count + b.count
    assert m.sum_variance == pytest.approx(a.sum_variance + b.sum_variance)
    assert m.count_variance == pytest.approx(a.count_variance + b.count_variance)
    assert m.noise["mechanism"] == "laplace"
    assert m.bounds == a.bounds and m.column_names == a.column_names
    assert m.privacy["parts"] == [a.privacy, b.privacy]
    # inputs are untouched
    assert not np.array_equal(a.sum_units, m.sum_units)
    # merging three flattens the record of releases
    m3 = m.merge(_sketch(fm, 3))
    assert len(m3.privacy["parts"]) == 3
    assert m3.count == a.count + b.count + _sketch(fm, 3).count


def test_merge_mixed_mechanisms():
    fm = ALL_MAPS["Histogram"]()
    a = _sketch(fm, 1)
    b = _sketch(fm, 2, noise={"mechanism": "gaussian", "sum_variance": 1.0, "count_variance": 2.0})
    m = a.merge(b)
    assert m.noise["mechanism"] == "mixed"
    assert m.sum_variance == pytest.approx(a.sum_variance + 1.0)


def test_merge_different_map():
    a = _sketch(dps.RFF(dim=3, num_features=10, bandwidth=0.7, seed=1))
    for other in (
        dps.RFF(dim=3, num_features=10, bandwidth=0.7, seed=2),
        dps.RFF(dim=3, num_features=10, bandwidth=0.8, seed=1),
        dps.QuantizedRFF(dim=3, num_features=10, bandwidth=0.7, seed=1),
    ):
        with pytest.raises(
            ValueError, match=r"^sketches use different feature maps \(fingerprints differ\)$"
        ):
            a.merge(_sketch(other))


@pytest.mark.parametrize(
    "change",
    [
        {"bounds": ([-1.0, -2.0, -3.0], [1.0, 1.5, 2.5])},
        {"bounds": None},
        {"column_names": ["x", "y", "z"]},
        {"column_names": None},
    ],
    ids=["bounds", "no-bounds", "names", "no-names"],
)
def test_merge_different_bounds_or_names(change):
    fm = ALL_MAPS["RACE-l2"]()
    with pytest.raises(
        ValueError, match="^sketches were released with different bounds, column names or schemas$"
    ):
        _sketch(fm, 1).merge(_sketch(fm, 2, **change))


def test_merge_non_sketch():
    with pytest.raises(ValueError, match="^can only merge a Sketch, got dict$"):
        _sketch(ALL_MAPS["Moments"]()).merge({})


def test_merge_overflow():
    fm = ALL_MAPS["Moments"]()
    big = np.full(fm.num_features, 2**62, dtype=np.int64)
    with pytest.raises(ValueError, match="^merged sum exceeds the int64 range$"):
        _sketch(fm, sum_units=big).merge(_sketch(fm, sum_units=big))


@pytest.mark.parametrize("kind", sorted(ALL_MAPS))
def test_merge_of_exact_halves_equals_union(kind):
    """Integer accumulation: Σ over the union == Σ over one half + Σ over the other, bit for bit,
    whatever the split, chunking or threading (the union spans several chunks)."""
    fm = ALL_MAPS[kind]()
    rng = np.random.default_rng(11)
    n = 9000
    X = rng.uniform(-2.0, 2.0, size=(n, fm.input_dim))
    if isinstance(fm, dps.ByClass):
        X[:, -1] = rng.integers(0, fm.num_classes, n)
    union = dps.Sketch(feature_map=fm, sum_units=np.array(fm.fixed_sum(X)), count=n)
    for cut in (1, 1234, 4096, 8999):
        a = dps.Sketch(feature_map=fm, sum_units=np.array(fm.fixed_sum(X[:cut], chunk_rows=1000)), count=cut)
        b = dps.Sketch(feature_map=fm, sum_units=np.array(fm.fixed_sum(X[cut:], n_jobs=1)), count=n - cut)
        merged = a.merge(b)
        assert np.array_equal(merged.sum_units, union.sum_units)
        assert merged.count == n
    # and the sum is the sum of the per-row integers, in any order
    rows = fm.fixed_features(X[::-1])
    assert np.array_equal(rows.sum(axis=0, dtype=np.int64), union.sum_units)


def test_sketch_rejects_bad_sum_units():
    fm = ALL_MAPS["Histogram"]()
    with pytest.raises(ValueError, match=r"^sum_units must be 9 integers, got shape \(8,\) of int64$"):
        dps.Sketch(feature_map=fm, sum_units=np.arange(8), count=1)
    with pytest.raises(ValueError, match=r"^sum_units must be 9 integers, got shape \(9,\) of float64$"):
        dps.Sketch(feature_map=fm, sum_units=np.zeros(9), count=1)


# -- merge: how the losses compose (finding 5 of issue 13) ----------------------------------------


def _released(fm, seed, **privacy):
    return _sketch(fm, seed, privacy={"measure": "MaxDivergence", "d_in": 1, **privacy})


def test_merge_is_sequential_by_default_with_a_total_loss(tmp_path):
    fm = ALL_MAPS["RFF"]()
    a, b = _released(fm, 1, epsilon=0.5), _released(fm, 2, epsilon=0.25)
    m = a.merge(b)
    assert m.privacy["composition"] == "sequential" and m.privacy["epsilon"] == 0.75
    assert m.privacy["measure"] == "MaxDivergence" and m.privacy["d_in"] == 1
    itself = a.merge(a)  # the same release twice: its loss counts twice
    assert itself.privacy["composition"] == "sequential" and itself.privacy["epsilon"] == 1.0
    m.save(tmp_path / "m.npz")
    assert dps.Sketch.load(tmp_path / "m.npz").privacy == m.privacy


def test_merge_declared_disjoint_is_parallel():
    fm = ALL_MAPS["RFF"]()
    a, b, c = _released(fm, 1, epsilon=0.5), _released(fm, 2, epsilon=0.25), _released(fm, 3, epsilon=0.75)
    m = a.merge(b, disjoint=True)
    assert m.privacy["composition"] == "parallel (disjoint datasets)" and m.privacy["epsilon"] == 0.5
    assert m.merge(c, disjoint=True).privacy["epsilon"] == 0.75  # flattened: 3 parts, max
    assert len(m.merge(c, disjoint=True).privacy["parts"]) == 3
    nested = m.merge(c)  # sequential over a parallel pair: 0.5 + 0.75
    assert nested.privacy["epsilon"] == 1.25 and nested.privacy["parts"][0]["composition"].startswith(
        "parallel"
    )


def test_merge_of_one_dataset_cannot_be_declared_disjoint():
    fm = ALL_MAPS["Histogram"]()
    a = _released(fm, 1, epsilon=0.5, dataset_id="survey", release_id=1)
    b = _released(fm, 2, epsilon=0.5, dataset_id="survey", release_id=2)
    with pytest.raises(
        ValueError, match="both sketches hold releases of dataset 'survey', so they are not disjoint"
    ):
        a.merge(b, disjoint=True)
    with pytest.raises(ValueError, match="a sketch merged with itself is not of disjoint datasets"):
        a.merge(a, disjoint=True)
    with pytest.raises(ValueError, match="disjoint"):
        a.merge(b, disjoint="yes")
    assert a.merge(b).privacy["epsilon"] == 1.0


@pytest.mark.parametrize(
    "pa, pb, total",
    [
        (
            {"measure": "Approximate(MaxDivergence)", "epsilon": 0.5, "delta": 1e-6},
            {"measure": "Approximate(MaxDivergence)", "epsilon": 0.25, "delta": 2e-6},
            {"epsilon": 0.75, "delta": 3e-6},
        ),
        (
            {"measure": "ZeroConcentratedDivergence", "rho": 0.125},
            {"measure": "ZeroConcentratedDivergence", "rho": 0.5},
            {"rho": 0.625},
        ),
        (
            {"measure": "MaxDivergence", "loss": 0.5},
            {"measure": "MaxDivergence", "loss": 0.25},
            {"loss": 0.75},
        ),
    ],
    ids=["epsilon-delta", "rho", "context-loss"],
)
def test_merge_adds_every_component_of_the_loss(pa, pb, total):
    fm = ALL_MAPS["Moments"]()
    m = _sketch(fm, 1, privacy={"d_in": 1, **pa}).merge(_sketch(fm, 2, privacy={"d_in": 1, **pb}))
    assert {k: m.privacy[k] for k in total} == pytest.approx(total)


def test_merge_of_incomparable_losses_has_no_total():
    fm = ALL_MAPS["Moments"]()
    pure = _released(fm, 1, epsilon=0.5)
    for other in (
        _sketch(fm, 2, privacy={"measure": "ZeroConcentratedDivergence", "d_in": 1, "rho": 0.1}),
        _sketch(fm, 3, privacy={"measure": "MaxDivergence", "d_in": 3, "epsilon": 0.5}),
        _sketch(fm, 4, privacy={}),
    ):
        m = pure.merge(other)
        assert (
            "epsilon" not in m.privacy
            and "rho" not in m.privacy
            and "no total loss" in m.privacy["loss_note"]
        )
        assert m.privacy["parts"] == [pure.privacy, other.privacy]


# -- bounded loading (finding 7 of issue 13) ---------------------------------------------------------


def _peak_bytes(load) -> tuple[int, Exception]:
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(dps.SketchFormatError) as info:
            load()
        return tracemalloc.get_traced_memory()[1], info.value
    finally:
        tracemalloc.stop()


def test_a_zip_bomb_is_refused_before_it_is_inflated(tmp_path, saved):
    _, sk, _ = saved
    meta = sk.to_dict()
    bomb = np.zeros(20_000_000, dtype="<i8")  # 160 MB of zeros deflate to ~0.16 MB
    meta["sha256"] = _digest(meta, bomb)
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), sum_units=bomb)
    del bomb
    assert path.stat().st_size < 300_000
    peak, err = _peak_bytes(lambda: dps.Sketch.load(path))
    assert "would expand" in str(err) and peak < 8_000_000


def test_an_npy_header_asking_for_a_huge_array_is_refused_before_allocating(tmp_path, saved):
    _, sk, _ = saved
    meta = json.dumps(sk.to_dict()).encode()
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, dtype="<i8"))
    header["shape"] = (20_000_000,)  # the entry holds 8 bytes of data
    body = io.BytesIO()
    np.lib.format.write_array_header_1_0(body, header)
    body.write(b"\x00" * 8)
    path = tmp_path / "shape.npz"
    with zipfile.ZipFile(path, "w") as zf:
        buf = io.BytesIO()
        np.save(buf, np.frombuffer(meta, dtype=np.uint8))
        zf.writestr("meta.npy", buf.getvalue())
        zf.writestr("sum_units.npy", body.getvalue())
    peak, err = _peak_bytes(lambda: dps.Sketch.load(path))
    assert "declares 20000000 items of 8 bytes but holds 8 bytes" in str(err) and peak < 8_000_000


@pytest.mark.parametrize(
    "params, match",
    [
        ({"dim": 1 << 20, "num_features": 1 << 40}, r"dim \(1048576\) must be at most 65536"),
        (
            {"dim": 3, "num_features": 1 << 40},
            r"num_features \(1099511627776\) exceeds what the 10 stored features",
        ),
        (
            {"dim": 60_000, "num_features": 10},
            None,
        ),  # fits the size rules: built, then the fingerprint differs
    ],
    ids=["huge-dim", "huge-features", "plausible"],
)
def test_a_huge_feature_map_spec_is_a_format_error(tmp_path, saved, params, match):
    _, sk, _ = saved
    meta = sk.to_dict()
    meta["feature_map"]["params"].update(params)
    _write(tmp_path / "huge.npz", meta, sk.sum_units)
    peak, err = _peak_bytes(lambda: dps.Sketch.load(tmp_path / "huge.npz"))
    assert "invalid sketch contents" in str(err) and peak < 64_000_000
    if match:
        import re

        assert re.search(match, str(err))


def test_regenerated_draws_are_bounded(tmp_path):
    fm = dps.RACE(dim=3, rows=2, buckets=5, seed=1)
    sk = dps.Sketch(fm, np.arange(10), 4)
    meta = sk.to_dict()
    meta["feature_map"]["params"].update(dim=60_000, rows=1000, hashes_per_row=10)
    _write(tmp_path / "race.npz", meta, sk.sum_units)
    _load_fails(
        tmp_path / "race.npz", r"would regenerate 600000000 public random numbers in all \(at most 2097152\)"
    )

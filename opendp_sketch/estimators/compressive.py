r"""Compressive learning from a released random-Fourier sketch: k-means and diagonal GMMs.

The sketch ``ẑ ≈ (1/n) Σ Φ(x_i)`` of an RFF map samples the data's characteristic function at
the public frequencies ``ω_l``. A mixture ``Σ_j α_j P_j`` has sketch ``Σ_j α_j A(P_j)`` with a
closed-form *atom* ``A(P)``: for a point mass at ``c`` (k-means) ``A(δ_c)_l = cos(ω_lᵀc + o_l)``, for
a Gaussian ``N(μ, diag(s²))`` the same times ``exp(-½ Σ_d ω_dl² s_d²)``. Fitting the mixture is
the CL-OMPR decoder (Keriven et al. 2017, used with DP sketches by Schellekens et al. 2019):

1. add the atom most correlated with the residual (multi-start L-BFGS-B inside the box);
2. non-negative least squares on the weights; after ``k`` atoms, keep the ``k`` largest;
3. refine all atoms and weights jointly (L-BFGS-B, box and ``α ≥ 0`` constraints);

repeated ``2k`` times, with several random restarts kept by the smallest sketch residual.
Everything reads the sketch and public draws only, so it is post-processing: no privacy cost,
and the cost does not depend on ``n``.

All maps are handled through one parametrisation: feature ``l`` has a frequency column
``w_l``, a phase offset ``o_l`` and an amplitude ``a_l``, so ``A(δ_c)_l = a_l cos(w_lᵀc + o_l)``.
For :class:`~opendp_sketch.RFF` the features are ``cos`` (``o = 0``) and ``sin`` (``o = -π/2``) of
the same frequencies, ``a = 1``. For :class:`~opendp_sketch.QuantizedRFF`,
``sign(cos(t)) = (4/π)(cos t − cos 3t / 3 + …)`` so the atom keeps the first harmonic:
``a = 4/π`` and ``o`` the public dither; the higher harmonics act as extra approximation error
(Schellekens & Jacques 2018).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize
import scipy.special
from threadpoolctl import threadpool_limits

from .._validate import check_bounds
from ..backends.tables import encode_rows
from ..features.base import FeatureMap
from ..features.rff import RFF, QuantizedRFF
from ..features.subsampled import SubsampledRFF
from ..planning import noise_to_signal
from ..schema import Schema
from ..sketch import Sketch

__all__ = [
    "CompressiveKMeans",
    "CompressiveGMM",
    "compressive_kmeans",
    "compressive_feature_map",
]

#: random candidates scored before each atom search's local optimisation
_CANDIDATES = 1024
#: best-scored candidates moved by mean-shift steps in each atom search
_SHIFTED = 64
#: mean-shift steps (float32) per atom search
_SHIFT_STEPS = 20
#: frequencies kept by the blob-smoothed search: damped to at least this share of the least damped
_SMOOTH_KEEP = 0.01
#: candidates refined by L-BFGS-B in each atom search
_STARTS = 3
#: a component with less than this share of 1/k of the mass triggers another restart
_SLIVER = 0.25
#: L-BFGS-B iterations of the joint refinement after each greedy step (the last one uses max_iter)
_STEP_ITER = 60


@dataclass(frozen=True)
class _Atoms:
    r"""Public description of a sketch's features through ``E = a·e^{i(Wᵀc + o)}`` per frequency.

    With ``pair`` the features are ``[Re E, Im E]`` (RFF's cos and sin), otherwise ``Re E``.
    """

    W: np.ndarray  # (d, F) frequencies
    W2: np.ndarray  # (d, F) squared frequencies (Gaussian damping)
    offset: np.ndarray  # (F,)
    amp: float
    pair: bool

    def complex_sketch(self, z: np.ndarray) -> np.ndarray:
        """The sketch in the same complex layout (``z_cos + i z_sin`` for pairs)."""
        F = self.W.shape[1]
        return z[:F] + 1j * z[F:] if self.pair else z.astype(np.complex128)


def _base_rff(fm: FeatureMap) -> FeatureMap:
    # a subsampled map estimates the same E Φ(x) as its plain base map
    base = getattr(fm, "base_map", None)
    return base if isinstance(base, (RFF, QuantizedRFF)) else fm


def _atoms_of(fm: FeatureMap, who: str) -> _Atoms:
    fm = _base_rff(fm)
    if isinstance(fm, RFF):
        W, offset, amp, pair = fm.frequencies, np.zeros(fm.num_frequencies), 1.0, True
    elif isinstance(fm, QuantizedRFF):
        W, offset, amp, pair = fm.frequencies, np.asarray(fm.dither, dtype=np.float64), 4.0 / np.pi, False
    else:
        raise ValueError(
            f"{who} needs an RFF, QuantizedRFF or subsampled RFF sketch, got {type(fm).__name__}"
        )
    W = np.ascontiguousarray(W, dtype=np.float64)
    return _Atoms(W=W, W2=W * W, offset=offset, amp=amp, pair=pair)


def _check_box(bounds: Any, sketch: Sketch, who: str) -> tuple[np.ndarray, np.ndarray]:
    d = sketch.feature_map.input_dim
    if bounds is None:
        if sketch.bounds is None:
            raise ValueError(f"{who} needs bounds=(lower, upper): the sketch does not record its box")
        bounds = sketch.bounds
    return check_bounds(bounds, d)


def _check_k(k: Any, name: str) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"{name} ({k!r}) must be a positive integer")
    return int(k)


def _check_sketch(sketch: Any, who: str) -> Sketch:
    if not isinstance(sketch, Sketch):
        raise ValueError(f"{who}.fit needs a Sketch, got {type(sketch).__name__}")
    if sketch.count <= 0:
        raise ValueError(f"{who}: the sketch's noisy count is {sketch.count} <= 0; nothing to decode")
    return sketch


class _CLOMPR:
    """The decoder: atoms with centres ``C`` (K×d) and, for Gaussians, std devs ``S`` (K×d)."""

    def __init__(
        self,
        z: np.ndarray,
        atoms: _Atoms,
        lo: np.ndarray,
        hi: np.ndarray,
        gaussian: bool,
        s_bounds: tuple[np.ndarray, np.ndarray] | None,
    ) -> None:
        self.z, self.at, self.lo, self.hi = z, atoms, lo, hi
        self.zc = atoms.complex_sketch(z)
        self.gaussian = gaussian
        self.s_lo: Any
        self.s_hi: Any
        self.s_lo, self.s_hi = s_bounds if s_bounds is not None else (None, None)
        self.d = lo.shape[0]
        self.cloud = ((lo + hi) / 2, (hi - lo) / 4)
        self._best_corr = 0.0
        #: per-column variance of the kernel's Gaussian bump, 1/mean(ω_d²)
        self.kernel_var = 1.0 / np.maximum(atoms.W2.mean(axis=1), 1e-300)
        self._smooth_idx = np.arange(atoms.W.shape[1])
        if not gaussian:
            # blob width for the atom search: the kernel's own scale per column, 1/rms(ω_d)
            s_fix = 1.0 / np.sqrt(np.maximum(atoms.W2.mean(axis=1), 1e-300))
            s_fix = np.minimum(s_fix, (hi - lo) / 2)
            # the blob damps frequency l by exp(-½ Σ_d s_d² ω_dl²): the smoothed search keeps
            # only the frequencies damped to at least 1 % of the least damped (about half of
            # them in 10-D; the rest add < 1 % each, mostly noise), which halves its cost
            damp = np.exp(-0.5 * ((s_fix * s_fix) @ atoms.W2))
            self._smooth_idx = np.flatnonzero(damp >= _SMOOTH_KEEP * damp.max())
            self.smoother = self._subset(self._smooth_idx, (s_fix, s_fix))
            self.smoother.kernel_var = self.kernel_var  # the same smoothed function, fewer terms

    def _subset(self, idx: np.ndarray, s_bounds: tuple[np.ndarray, np.ndarray] | None) -> _CLOMPR:
        """The problem restricted to the frequencies ``idx`` (a Gaussian one with ``s_bounds``)."""
        at = self.at
        F = at.W.shape[1]
        z = np.concatenate([self.z[:F][idx], self.z[F:][idx]]) if at.pair else self.z[idx]
        sub = _Atoms(W=at.W[:, idx], W2=at.W2[:, idx], offset=at.offset[idx], amp=at.amp, pair=at.pair)
        return _CLOMPR(z, sub, self.lo, self.hi, s_bounds is not None, s_bounds)

    def coarse(self, keep: int) -> _CLOMPR:
        """The same problem on the ``keep`` lowest-norm frequencies: a wider kernel, smoother
        correlations, for a first solution that the full problem then refines."""
        idx = np.sort(np.argsort(self.at.W2.sum(axis=0))[:keep])
        dec = self._subset(idx, None if self.s_lo is None else (self.s_lo, self.s_hi))
        dec.cloud = self.cloud
        return dec

    def fit_cloud(self) -> None:
        """Fit one diagonal Gaussian to the whole sketch: where the data are, and how spread.

        Started at the box centre with a wide spread, the one-atom objective is smooth (the
        wide atom only sees the low frequencies), so a local optimiser finds it reliably. The
        spread is kept at least the kernel's own scale ``1/rms(ω_d)``: a narrower blob would fit
        one cluster's high frequencies instead of the whole cloud.
        """
        width = self.hi - self.lo
        s_min = np.minimum(1.0 / np.sqrt(np.maximum(self.at.W2.mean(axis=1), 1e-300)), width / 4)
        one = _CLOMPR(self.z, self.at, self.lo, self.hi, True, (s_min, width / 2))
        x0 = np.concatenate([(self.lo + self.hi) / 2, width / 4])
        x, _ = one._refine(x0, one._nnls(x0, 1), 1, 500)
        self.cloud = (x[: self.d], x[self.d :])

    # -- atoms ----------------------------------------------------------------------------
    def _values(self, C: np.ndarray, S: np.ndarray | None) -> np.ndarray:
        """``E`` (K×F complex): atom ``j``'s features are ``Re E_j`` (and ``Im E_j`` for pairs)."""
        theta = C @ self.at.W
        theta += self.at.offset
        E = np.empty(theta.shape, dtype=np.complex128)
        # cos and sin separately: about 1.4x faster than the complex exponential
        np.cos(theta, out=E.real)
        np.sin(theta, out=E.imag)
        if self.gaussian and S is not None:
            E *= self.at.amp * np.exp(-0.5 * ((S * S) @ self.at.W2))
        elif self.at.amp != 1.0:
            E *= self.at.amp
        return E

    def _scores(self, cand: np.ndarray, s: np.ndarray | None, r: np.ndarray) -> np.ndarray:
        """``⟨features, r⟩ / ‖features‖`` of many atoms sharing one width ``s`` (None: points).

        Only used to rank random candidates, so it runs in float32 (4-5x faster than float64
        here); with one width all atoms share the damping, and for cos/sin pairs also the norm.
        """
        at = self.at
        theta = cand.astype(np.float32) @ at.W.astype(np.float32)
        theta += at.offset.astype(np.float32)
        damp = np.full(at.W.shape[1], at.amp)
        if s is not None:
            damp *= np.exp(-0.5 * ((s * s) @ at.W2))
        cos = np.cos(theta)
        ip = cos @ (damp * r.real).astype(np.float32)
        if at.pair:
            ip += np.sin(theta) @ (damp * r.imag).astype(np.float32)
            return ip.astype(np.float64)
        norm2 = (cos * cos) @ (damp * damp).astype(np.float32)
        return ip.astype(np.float64) / np.sqrt(np.maximum(norm2.astype(np.float64), 1e-300))

    def _pack(self, C: np.ndarray, S: np.ndarray | None) -> np.ndarray:
        return np.concatenate([C.ravel()] + ([S.ravel()] if self.gaussian and S is not None else []))

    def _unpack(self, x: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray | None]:
        C = x[: K * self.d].reshape(K, self.d)
        S = x[K * self.d : 2 * K * self.d].reshape(K, self.d) if self.gaussian else None
        return C, S

    def _param_bounds(self, K: int) -> list[tuple[float, float]]:
        b = list(zip(np.tile(self.lo, K), np.tile(self.hi, K)))
        if self.gaussian:
            b += list(zip(np.tile(self.s_lo, K), np.tile(self.s_hi, K)))
        return b

    # -- step 1: the atom most correlated with the residual --------------------------------
    def _correlation(self, x: np.ndarray, r: np.ndarray) -> tuple[float, np.ndarray]:
        C, S = self._unpack(x, 1)
        e = self._values(C, S)[0]
        # ⟨v, r⟩ = Re(e·r̄); the features' θ-derivative pairs with r as -Im(e·r̄)
        er = e * r.conj()
        ip = float(er.real.sum())
        if self.at.pair:
            nv2, d_nn = float((np.abs(e) ** 2).sum()), np.zeros_like(e.real)
        else:
            nv2, d_nn = float((e.real**2).sum()), -e.real * e.imag
        nv = math.sqrt(nv2) or 1e-300
        grad = [(-(self.at.W @ er.imag) * nv - ip * (self.at.W @ d_nn) / nv) / nv2]
        if self.gaussian and S is not None:
            # d(feature)/ds_d = -(feature)·w_d²·s_d
            sq = np.abs(e) ** 2 if self.at.pair else e.real**2
            ds_ip = -(self.at.W2 @ er.real) * S[0]
            ds_nn = -(self.at.W2 @ sq) * S[0] / nv
            grad.append((ds_ip * nv - ip * ds_nn) / nv2)
        return -ip / nv, -np.concatenate(grad)

    def _candidates(self, rng: np.random.Generator, count: int, widen: float) -> np.ndarray:
        """Random starts from the one-Gaussian summary of the sketch (see ``fit_cloud``).

        In high dimension the data fill a small part of the box, so the starts come from where
        the correlation is not flat; thirds of them are drawn 1, 1.5 and 2 times (× ``widen``)
        as spread as the summary, which under-reads the spread of a multi-modal cloud.
        """
        mean, std = self.cloud
        mult = widen * np.repeat([1.0, 1.5, 2.0], -(-count // 3))[:count, None]
        return np.clip(mean + rng.normal(size=(count, self.d)) * std * mult, self.lo, self.hi)

    def _shift(self, cand: np.ndarray, s: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Move many starts uphill at once: mean-shift steps on the smoothed correlation.

        For a residual that is a positive mixture of Gaussian bumps of variance ``h²`` per
        column (kernel ``1/mean(ω_d²)`` plus blob ``s_d²``), ``c + h²·∇f(c)/f(c)`` is the
        bump-weighted mean of the centres: the mean-shift update, which climbs without a step
        size. Starts where ``f ≤ 0`` stay put. Float32: only used to pick starts.
        """
        at = self.at
        W = at.W.astype(np.float32)
        damp = at.amp * np.exp(-0.5 * ((s * s) @ at.W2))
        h2 = (self.kernel_var + s * s).astype(np.float32)
        a = (damp * r.real).astype(np.float32)
        b = (damp * r.imag).astype(np.float32)
        off = at.offset.astype(np.float32)
        lo, hi = self.lo.astype(np.float32), self.hi.astype(np.float32)
        c = cand.astype(np.float32)
        for _ in range(_SHIFT_STEPS):
            theta = c @ W
            theta += off
            cos, sin = np.cos(theta), np.sin(theta)
            f = cos @ a + sin @ b
            grad = (cos * b - sin * a) @ W.T
            up = f > 0
            c = np.clip(c + np.where(up[:, None], h2 * grad / np.where(up, f, 1.0)[:, None], 0.0), lo, hi)
        return c.astype(np.float64)

    def _search(
        self,
        r: np.ndarray,
        rng: np.random.Generator,
        s0: np.ndarray | None,
        smooth: bool,
        count: int,
        widen: float,
    ) -> tuple[float, np.ndarray]:
        # every start is scored against the residual smoothed by a Gaussian blob as wide as the
        # kernel (the smoother: wider basins), the best are mean-shifted, rescored, and the top
        # few refined. With ``smooth`` a point mass is then searched by continuation: first the
        # blob, then the point; restarts alternate (the smallest residual wins).
        smooth = smooth or self.gaussian
        search = self if self.gaussian else self.smoother
        s_start: Any = s0 if self.gaussian else self.smoother.s_lo
        rs = r if self.gaussian else r[self._smooth_idx]
        cand = self._candidates(rng, count, widen)
        cand = cand[np.argsort(-search._scores(cand, s_start, rs))[:_SHIFTED]]
        cand = search._shift(cand, s_start, rs)
        best, best_x = math.inf, cand[0]
        for i in np.argsort(-search._scores(cand, s_start, rs))[:_STARTS]:
            x = cand[i]
            if smooth:
                x = search._ascend(search._pack(cand[i : i + 1], s_start[None, :]), rs)
            if not self.gaussian:
                x = self._ascend(x[: self.d], r)
            fun = self._correlation(x, r)[0]
            if fun < best:
                best, best_x = fun, x
        return -best, best_x

    def _new_atom(
        self, r: np.ndarray, rng: np.random.Generator, s0: np.ndarray | None, smooth: bool
    ) -> np.ndarray:
        """The atom most correlated with the residual ``r``.

        The correlation found is public (it reads the sketch only): when it falls below half the
        best of this run, a mass the search missed (typically a cluster far out in the cloud)
        is likelier than a step with nothing left to find, so the search runs again with 4x
        the starts drawn 1.5x wider, and the better atom is kept.
        """
        corr, x = self._search(r, rng, s0, smooth, _CANDIDATES, 1.0)
        if corr < 0.5 * self._best_corr:
            corr2, x2 = self._search(r, rng, s0, smooth, 2 * _CANDIDATES, 1.5)
            if corr2 > corr:
                corr, x = corr2, x2
        self._best_corr = max(self._best_corr, corr)
        return x

    def _ascend(self, x0: np.ndarray, r: np.ndarray) -> np.ndarray:
        res = scipy.optimize.minimize(
            self._correlation,
            x0,
            args=(r,),
            jac=True,
            method="L-BFGS-B",
            bounds=self._param_bounds(1),
            options={"maxiter": 200},
        )
        return res.x

    # -- steps 2 and 3 -----------------------------------------------------------------------
    def _feature_matrix(self, E: np.ndarray) -> np.ndarray:
        return np.concatenate([E.real, E.imag], axis=1) if self.at.pair else E.real

    def _nnls(self, x: np.ndarray, K: int) -> np.ndarray:
        A = self._feature_matrix(self._values(*self._unpack(x, K)))
        alpha, _ = scipy.optimize.nnls(A.T, self._feature_matrix(self.zc[None, :])[0])
        return alpha

    def _residual(self, E: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        R = self.zc - alpha @ E
        return R if self.at.pair else R.real.astype(np.complex128)

    def _objective(self, y: np.ndarray, K: int) -> tuple[float, np.ndarray]:
        x, alpha = y[:-K], y[-K:]
        C, S = self._unpack(x, K)
        E = self._values(C, S)
        R = self._residual(E, alpha)
        ER = E * R.conj()
        # F = ‖R‖²;  ∂F/∂α_j = -2 Re⟨E_j, R⟩;  ∂F/∂c_j = 2 α_j W Im(E_j R̄);  ∂F/∂s_jd = 2 α_j s_jd (W² Re(E_j R̄))_d
        grads = [(2.0 * alpha[:, None] * (ER.imag @ self.at.W.T)).ravel()]
        if self.gaussian and S is not None:
            grads.append((2.0 * alpha[:, None] * S * (ER.real @ self.at.W2.T)).ravel())
        grads.append(-2.0 * ER.real.sum(axis=1))
        return float((np.abs(R) ** 2).sum()), np.concatenate(grads)

    def _refine(
        self, x: np.ndarray, alpha: np.ndarray, K: int, maxiter: int
    ) -> tuple[np.ndarray, np.ndarray]:
        res = scipy.optimize.minimize(
            self._objective,
            np.concatenate([x, alpha]),
            args=(K,),
            jac=True,
            method="L-BFGS-B",
            bounds=self._param_bounds(K) + [(0.0, None)] * K,
            options={"maxiter": maxiter},
        )
        return res.x[:-K], res.x[-K:]

    def residual(self, x: np.ndarray, alpha: np.ndarray, K: int) -> float:
        R = self._residual(self._values(*self._unpack(x, K)), alpha)
        return float(np.sqrt((np.abs(R) ** 2).sum()))

    def run(
        self, k: int, rng: np.random.Generator, s0: np.ndarray | None, maxiter: int, smooth: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """CL-OMPR with ``2k`` iterations; returns the packed atom parameters and weights."""
        params: list[np.ndarray] = []
        alpha = np.zeros(0)
        r = self.zc.copy()
        self._best_corr = 0.0
        for _ in range(2 * k):
            params.append(self._new_atom(r, rng, s0, smooth))
            if len(params) > k:
                # hard thresholding: keep the k atoms with the largest NNLS weights
                keep = np.sort(np.argsort(-self._nnls(self._pack_list(params), len(params)))[:k])
                params = [params[i] for i in keep]
            K = len(params)
            x = self._pack_list(params)
            # intermediate refinements only steer the next atom search: a short one is enough
            x, alpha = self._refine(x, self._nnls(x, K), K, min(maxiter, _STEP_ITER))
            params = self._unpack_list(x, K)
            r = self._residual(self._values(*self._unpack(x, K)), alpha)
        x, alpha = self._refine(self._pack_list(params), alpha, len(params), maxiter)
        return x, alpha

    # one atom's parameters are (c, s); a packed vector holds all c, then all s
    def _pack_list(self, params: list[np.ndarray]) -> np.ndarray:
        cs = [p[: self.d] for p in params]
        ss = [p[self.d :] for p in params] if self.gaussian else []
        return np.concatenate(cs + ss)

    def _unpack_list(self, x: np.ndarray, K: int) -> list[np.ndarray]:
        C, S = self._unpack(x, K)
        if S is None:
            return [C[j] for j in range(K)]
        return [np.concatenate([C[j], S[j]]) for j in range(K)]


def _box_widths(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return hi - lo


def compressive_feature_map(
    bounds: Any,
    k: int,
    *,
    num_features: int | None = None,
    scale: float | None = None,
    quantized: bool = False,
    seed: int = 0,
    n: int | None = None,
) -> FeatureMap:
    r"""A random-Fourier map for compressive k-means / GMM, chosen from public information only.

    * ``num_features``: ``2·10·k·d`` by default, i.e. ``m' = 10kd`` frequencies (the CKM paper's
      ``m = 10kd`` complex measurements); see :func:`~opendp_sketch.suggest_sketch_size`.
    * bandwidth ``σ`` of the Gaussian frequencies ``ω ~ N(0, σ⁻² I)``: the user's rough
      ``scale`` (typical distance between cluster centres) if given, otherwise
      ``σ = mean box width / 8``. The decoder needs ``‖ω‖·(distance between centres) ≳ 1``
      to tell clusters apart and ``‖ω‖·(cluster spread)`` not much above 1 so the sketch keeps
      signal above the noise; the box rule puts ``‖ω‖ ≈ √d/σ`` at a few box-widths⁻¹, and
      ``benchmarks/bench_ckm.py`` shows the result is flat over a factor of 2 in box size.
    * with a public estimate ``n`` of the number of rows, each row evaluates only ``r`` of the
      ``m'`` frequencies (:class:`~opendp_sketch.features.subsampled.SubsampledRFF`): a release
      costs about ``r/m'`` of the full map's time, for the same L1 sensitivity. ``r`` is the
      smallest divisor of ``m'`` whose subsampling noise-to-signal ratio
      (:func:`~opendp_sketch.planning.noise_to_signal` with signal ``1/k``) is at most
      ``SUBSAMPLING_NSR = 0.01``, that is ``(m'/r − 1)·k/n ≤ 0.01``: ``r = 1`` from about
      ``n = 10⁵·k`` rows on. A wrong guess of ``n`` costs accuracy or time, never privacy.

    :param bounds: the public box ``(lower, upper)`` (a number or one per column each)
    :param k: number of clusters planned
    :param num_features: number of real features ``m`` (even for RFF)
    :param scale: optional public rough distance between cluster centres
    :param quantized: one-bit :class:`~opendp_sketch.QuantizedRFF` instead of RFF
    :param seed: seed of the public frequencies
    :param n: optional public estimate of the number of rows (never read from the data); turns
        on feature subsampling, as above. Not combined with ``quantized``.
    :return: an :class:`~opendp_sketch.RFF`, a
        :class:`~opendp_sketch.features.subsampled.SubsampledRFF` (with ``n``) or a
        :class:`~opendp_sketch.QuantizedRFF`
    :raises ValueError: on degenerate bounds or bad numbers
    :example:

    >>> import opendp_sketch as dps
    >>> fm = dps.estimators.compressive_feature_map(([-20.0] * 10, [20.0] * 10), k=10)
    >>> type(fm).__name__, fm.num_features, fm.bandwidth
    ('RFF', 2000, 5.0)
    >>> fm = dps.estimators.compressive_feature_map(([-20.0] * 10, [20.0] * 10), k=10, n=200_000)
    >>> type(fm).__name__, fm.r, fm.num_blocks                    # 5 of the 1000 frequencies per row
    ('SubsampledRFF', 5, 200)
    """
    k = _check_k(k, "k")
    try:
        lo, hi = (np.atleast_1d(np.asarray(b, dtype=np.float64)) for b in bounds)
        lo, hi = np.broadcast_arrays(lo, hi)
    except (TypeError, ValueError):
        raise ValueError("bounds must be (lower, upper), each a number or one number per column") from None
    if lo.ndim != 1 or not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all()):
        raise ValueError("bounds must be finite with lower < upper in every column")
    d = lo.shape[0]
    if scale is None:
        bandwidth = float(np.mean(_box_widths(lo, hi))) / 8.0
    else:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (0 < scale < math.inf):
            raise ValueError(f"scale ({scale!r}) must be a positive finite number")
        bandwidth = float(scale)
    if num_features is None:
        num_features = 10 * k * d * (1 if quantized else 2)
    if quantized:
        if n is not None:
            raise ValueError("n (feature subsampling) applies to RFF maps, not quantized=True")
        return QuantizedRFF(dim=d, num_features=num_features, bandwidth=bandwidth, seed=seed)
    if n is None:
        return RFF(dim=d, num_features=num_features, bandwidth=bandwidth, seed=seed)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n ({n!r}) must be a positive integer: a public estimate of the row count")
    return SubsampledRFF(
        dim=d,
        num_features=num_features,
        bandwidth=bandwidth,
        seed=seed,
        r=subsampling_rate(num_features // 2, int(n), k),
    )


#: largest subsampling noise-to-signal ratio the automatic compressive map accepts
SUBSAMPLING_NSR = 0.01


def subsampling_rate(num_frequencies: int, n: int, k: int) -> int:
    """The smallest divisor ``r`` of ``m'`` with subsampling NSR ``(m'/r − 1)·k/n ≤ SUBSAMPLING_NSR``.

    :example:

    >>> from opendp_sketch.estimators.compressive import subsampling_rate
    >>> [subsampling_rate(1000, n, k=10) for n in (10**4, 2 * 10**5, 10**6, 10**7)]
    [100, 5, 1, 1]
    """
    for r in range(1, num_frequencies + 1):
        if num_frequencies % r == 0:
            nsr = noise_to_signal(num_frequencies, n, mechanism="laplace", budget=1.0, r=r, signal=1.0 / k)
            if float(nsr["nsr_subsampling"]) <= SUBSAMPLING_NSR:
                return r
    return num_frequencies


class _CompressiveMixture:
    """Shared ``fit`` of :class:`CompressiveKMeans` and :class:`CompressiveGMM`."""

    _gaussian = False
    _who = "CompressiveKMeans"

    def __init__(
        self, k: int, bounds: Any, n_restarts: int, seed: int, max_iter: int, early_stop: bool = True
    ) -> None:
        self._k, self.bounds, self.n_restarts, self.seed, self.max_iter = (
            k,
            bounds,
            n_restarts,
            seed,
            max_iter,
        )
        self.early_stop = early_stop

    def _check_options(self) -> int:
        k = _check_k(self._k, "n_clusters" if not self._gaussian else "n_components")
        _check_k(self.n_restarts, "n_restarts")
        _check_k(self.max_iter, "max_iter")
        if not isinstance(self.early_stop, bool):
            raise ValueError(f"early_stop ({self.early_stop!r}) must be True or False")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"seed ({self.seed!r}) must be a non-negative integer")
        return k

    def _fit(self, sketch: Any) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, float]:
        k = self._check_options()
        sketch = _check_sketch(sketch, self._who)
        #: the sketch's public schema (``None`` without one): rows are then read in its units
        self.schema_ = None if sketch.schema is None else Schema.from_dict(sketch.schema)
        atoms = _atoms_of(sketch.feature_map, self._who)
        lo, hi = _check_box(self.bounds, sketch, self._who)
        d = lo.shape[0]
        per_atom = d * (2 if self._gaussian else 1) + 1
        M = atoms.W.shape[1] * (2 if atoms.pair else 1)  # real measurements
        if M < k * per_atom:
            raise ValueError(
                f"k = {k} needs at least {k * per_atom} sketch features ({per_atom} unknowns per "
                f"component), the sketch has {M}: use a larger map or a smaller k"
            )
        width = _box_widths(lo, hi)
        s_bounds, s0 = None, None
        if self._gaussian:
            s_bounds = (width * 1e-3, width / 2)
            s0 = width / (4.0 * k ** (1.0 / d))
        z = sketch.mean
        best: tuple[float, np.ndarray, np.ndarray] | None = None
        dec = _CLOMPR(z, atoms, lo, hi, self._gaussian, s_bounds)
        # small dense products: threads only add overhead, and the result must not depend on them
        with threadpool_limits(limits=1):
            dec.fit_cloud()
            F = atoms.W.shape[1]
            keep = min(F, max(F // 4, k * per_atom))
            for restart in range(self.n_restarts):
                rng = np.random.default_rng([self.seed, restart])
                # restarts rotate three searches (see the module docs): direct, coarse-to-fine
                # on the lowest frequencies first, and blob continuation of each atom search
                if restart % 3 == 1 and keep < F:
                    x, alpha = dec.coarse(keep).run(k, rng, s0, self.max_iter, smooth=False)
                    x, alpha = dec._refine(x, alpha, k, self.max_iter)
                else:
                    x, alpha = dec.run(k, rng, s0, self.max_iter, smooth=restart % 3 == 2)
                res = dec.residual(x, alpha, k)
                if best is None or res < best[0]:
                    best = (res, x, alpha)
                # a missed cluster shows as a component holding a sliver of the mass (its atom
                # sits where little data is): only then is another restart worth its time
                if self.early_stop and best[2].min() >= _SLIVER / k * max(float(best[2].sum()), 1e-300):
                    break
        assert best is not None
        res, x, alpha = best
        C, S = dec._unpack(x, k)
        order = np.lexsort(C.T[::-1])
        total = float(alpha.sum())
        weights = alpha / total if total > 0 else np.full(k, 1.0 / k)
        return (
            C[order],
            None if S is None else S[order],
            weights[order],
            res / max(float(np.linalg.norm(z)), 1e-300),
        )


def _rows(model: Any, X: Any) -> Any:
    """``X`` as the model's coordinates: rows in the table's units and labels read through a
    schema sketch's schema, else as given."""
    schema = getattr(model, "schema_", None)
    return X if schema is None else encode_rows(schema, X)


def _nearest(X: Any, centres: np.ndarray, who: str) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != centres.shape[1]:
        raise ValueError(f"{who}: X must have shape (n, {centres.shape[1]}), got {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError(f"{who}: X contains NaN or infinite values")
    out = np.empty(X.shape[0], dtype=np.int64)
    c2 = (centres * centres).sum(axis=1)
    for s in range(0, X.shape[0], 65536):
        B = X[s : s + 65536]
        out[s : s + 65536] = np.argmin(c2[None, :] - 2.0 * B @ centres.T, axis=1)
    return out


class CompressiveKMeans(_CompressiveMixture):
    r"""k-means from a private RFF sketch (CL-OMPR); sklearn-like, ``fit`` takes the sketch.

    :param n_clusters: ``k``
    :param bounds: the public box the centres lie in; default: the box recorded in the sketch
    :param n_restarts: at most this many independent CL-OMPR runs; the one with the smallest
        sketch residual wins
    :param seed: seed of the decoder's random starts (public; decoding is post-processing)
    :param max_iter: L-BFGS-B iterations of each joint refinement
    :param early_stop: stop restarting once the best fit gives every cluster at least a quarter
        of ``1/k`` of the mass (a missed cluster shows as an atom holding a sliver, where little
        data is); ``False`` runs all ``n_restarts``

    Fitted attributes: ``cluster_centers_`` (k×d), ``weights_`` (cluster proportions, summing
    to 1), ``residual_`` (``‖ẑ − Σ α_j A(δ_{c_j})‖ / ‖ẑ‖``).

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(-3, 0.5, (5000, 2)), rng.normal(3, 0.5, (5000, 2))])
    >>> fm = dps.estimators.compressive_feature_map(([-6, -6], [6, 6]), k=2)
    >>> sk = dps.release_sketch(X, fm, bounds=([-6, -6], [6, 6]), epsilon=1.0)
    >>> km = dps.CompressiveKMeans(n_clusters=2).fit(sk)
    >>> km.cluster_centers_.shape, km.predict(np.array([[-3.0, -3.0], [3.0, 3.0]])).tolist()
    ((2, 2), [0, 1])
    """

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        bounds: Any = None,
        n_restarts: int = 3,
        seed: int = 0,
        max_iter: int = 300,
        early_stop: bool = True,
    ) -> None:
        super().__init__(n_clusters, bounds, n_restarts, seed, max_iter, early_stop)
        self.n_clusters = n_clusters

    def fit(self, sketch: Sketch) -> CompressiveKMeans:
        """Decode ``k`` centres from ``sketch`` (post-processing).

        :raises ValueError: for a sketch of another map, a non-positive noisy count, bad bounds,
            or a ``k`` the sketch's size cannot support
        """
        self._k = self.n_clusters
        C, _, w, res = self._fit(sketch)
        self.cluster_centers_, self.weights_, self.residual_ = C, w, res
        self.n_features_in_ = C.shape[1]
        if self.schema_ is not None:
            #: the centres in the table's units and labels (a schema sketch's ``cluster_centers_``
            #: are its unit-free coordinates)
            self.centers_ = self.schema_.decode(C)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Index of the nearest centre for each row of ``X`` (public or the curator's own data;
        for a schema sketch, rows in the table's units and labels: a DataFrame or an array of
        every schema column in order)."""
        if not hasattr(self, "cluster_centers_"):
            raise ValueError("CompressiveKMeans is not fitted: call fit(sketch) first")
        return _nearest(_rows(self, X), self.cluster_centers_, "CompressiveKMeans.predict")


def compressive_kmeans(
    sketch: Sketch, k: int, bounds: Any = None, *, n_restarts: int = 3, seed: int = 0
) -> np.ndarray:
    """The ``k`` centres :class:`CompressiveKMeans` decodes from ``sketch`` (a ``(k, d)`` array).

    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.RFF(dim=1, num_features=40, bandwidth=1.0, seed=0)
    >>> X = np.repeat([[-2.0], [2.0]], 500, axis=0)
    >>> sk = dps.Sketch(fm, np.asarray(fm.fixed_sum(X)), 1000, bounds=([-4.0], [4.0]))  # no noise
    >>> np.round(dps.estimators.compressive_kmeans(sk, 2), 2).ravel().tolist()
    [-2.0, 2.0]
    """
    return CompressiveKMeans(k, bounds=bounds, n_restarts=n_restarts, seed=seed).fit(sketch).cluster_centers_


class CompressiveGMM(_CompressiveMixture):
    r"""A Gaussian mixture with diagonal covariances from a private RFF sketch (CL-OMPR).

    The atom of ``N(μ, diag(s²))`` is ``A(δ_μ) ⊙ exp(-½ Σ_d ω_d² s_d²)``: the Gaussian's
    characteristic function at the public frequencies. Standard deviations are kept in
    ``[10⁻³, ½]·(box width)``.

    Fitted attributes: ``means_`` (k×d), ``covariances_`` (k×d variances, sklearn's
    ``covariance_type="diag"`` layout), ``weights_``, ``residual_``.

    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.RFF(dim=1, num_features=60, bandwidth=1.0, seed=0)
    >>> X = np.random.default_rng(0).normal([[-2.0]] * 4000 + [[2.0]] * 4000, 0.5)
    >>> sk = dps.Sketch(fm, np.asarray(fm.fixed_sum(X)), 8000, bounds=([-5.0], [5.0]))  # no noise
    >>> g = dps.CompressiveGMM(n_components=2).fit(sk)
    >>> np.round(g.means_, 1).ravel().tolist(), np.round(np.sqrt(g.covariances_), 1).ravel().tolist()
    ([-2.0, 2.0], [0.5, 0.5])
    """

    _gaussian = True
    _who = "CompressiveGMM"

    def __init__(
        self,
        n_components: int = 1,
        *,
        bounds: Any = None,
        n_restarts: int = 3,
        seed: int = 0,
        max_iter: int = 300,
        early_stop: bool = True,
    ) -> None:
        super().__init__(n_components, bounds, n_restarts, seed, max_iter, early_stop)
        self.n_components = n_components

    def fit(self, sketch: Sketch) -> CompressiveGMM:
        """Decode the mixture from ``sketch`` (post-processing).

        :raises ValueError: as :meth:`CompressiveKMeans.fit`
        """
        self._k = self.n_components
        C, S, w, res = self._fit(sketch)
        assert S is not None
        self.means_, self.covariances_, self.weights_, self.residual_ = C, S * S, w, res
        self.n_features_in_ = C.shape[1]
        return self

    def _log_joint(self, X: Any) -> np.ndarray:
        if not hasattr(self, "means_"):
            raise ValueError("CompressiveGMM is not fitted: call fit(sketch) first")
        X = np.asarray(_rows(self, X), dtype=np.float64)
        d = self.means_.shape[1]
        if X.ndim != 2 or X.shape[1] != d:
            raise ValueError(f"CompressiveGMM: X must have shape (n, {d}), got {X.shape}")
        if not np.isfinite(X).all():
            raise ValueError("CompressiveGMM: X contains NaN or infinite values")
        var = self.covariances_
        with np.errstate(divide="ignore"):
            logw = np.log(self.weights_)
        quad = (((X[:, None, :] - self.means_[None]) ** 2) / var[None]).sum(axis=2)
        return logw - 0.5 * (quad + np.log(2 * np.pi * var).sum(axis=1))

    def score_samples(self, X: Any) -> np.ndarray:
        """Log density of the fitted mixture at each row of ``X``."""
        return scipy.special.logsumexp(self._log_joint(X), axis=1)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Posterior component probabilities (rows sum to 1)."""
        lj = self._log_joint(X)
        return np.exp(lj - scipy.special.logsumexp(lj, axis=1, keepdims=True))

    def predict(self, X: Any) -> np.ndarray:
        """Most probable component of each row."""
        return np.argmax(self._log_joint(X), axis=1)

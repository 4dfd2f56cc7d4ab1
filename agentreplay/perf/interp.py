"""Monotone interpolation of measured operator times, as the measured-table pricer uses it
(:class:`agentreplay.perf.table.TablePerfModel`). Times are seconds; token counts are tokens.

The measured points of an operator are sparse (every other compared token count in the validation protocol,
factor ~2 apart) and the curve between them is far from a straight line in log-log: a fixed cost, then a rise
towards proportionality, with a step where a GEMM needs one more tile of tokens. A *reference* (the refined
roofline of the same cell, which has those shapes) supplies the shape between two points: log seconds is
interpolated linearly in log reference seconds, ``t(x) = t_i * (R(x) / R_i) ** p_i`` with ``p_i`` fixed by the
two points. Where the measured curve is a constant multiple of the reference the interpolation is exact; where
the reference is flat between two points it falls back to log x. Because the reference never decreases and the
points are made non-decreasing first (isotonic regression in log space), the result never decreases either.

- :class:`Curve`: one operator against tokens (or sequences).
- :class:`Grid`: prefill attention per layer against (chunk tokens, cached context). Rows are completed along
  the context with the reference's shape; between context columns log seconds is linear in the log of the
  reference interpolated linearly in context (prefill attention is affine in the cached context: FLOPs
  ``chunk * (prefix + chunk / 2)`` and the prefix KV read), so the query needs no reference call; between token
  rows it is linear in log tokens (``reference_between_rows``: in log reference, as in :class:`Curve`, one
  reference call per query; the validation report compares the two, see
  :func:`validation.components.diagnostics.grid_rule_cv`). The rows are combined as a running maximum over rows, which
  keeps the grid non-decreasing along both axes.
- :func:`fit_decode`: decode attention per layer, ``a_b + c_b * b * ctx`` for each measured batch size ``b``
  (linear in the summed context for a given batch size, as the simulator's decode fast path requires).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

#: Below this log-reference rise between two points the reference counts as flat (fall back to log x / context).
FLAT_LOG: float = 1e-9


def isotonic(y: np.ndarray) -> np.ndarray:
    """Non-decreasing least-squares fit to ``y`` (pool adjacent violators, equal weights); ``y`` itself when
    it is already non-decreasing."""
    vals: list[float] = []
    counts: list[int] = []
    for v in np.asarray(y, dtype=float):
        vals.append(float(v))
        counts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            n = counts[-2] + counts[-1]
            vals[-2] = (vals[-2] * counts[-2] + vals[-1] * counts[-1]) / n
            counts[-2] = n
            vals.pop()
            counts.pop()
    return np.repeat(vals, counts)


def _mean_by(inv: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.bincount(inv, weights=values) / np.bincount(inv)


class Curve:
    """Monotone interpolation of seconds through measured points (x > 0); repeated x are averaged in log space.

    ``reference``: the reference's seconds at each x (> 0, non-decreasing in x); between neighbouring points log
    seconds is then linear in log reference (module docstring), else in log x. Outside ``[lo, hi]`` the caller
    anchors (:meth:`at`)."""

    __slots__ = ("hi", "lo", "lr", "lx", "ly")

    def __init__(self, x: ArrayLike, seconds: ArrayLike, reference: ArrayLike | None = None) -> None:
        xs, s = np.asarray(x, dtype=float), np.asarray(seconds, dtype=float)
        if len(xs) == 0 or len(xs) != len(s) or (xs <= 0).any() or (s <= 0).any():
            raise ValueError("a curve needs as many x as seconds, at least one point, all > 0")
        ux, inv = np.unique(xs, return_inverse=True)
        # Python floats, not arrays: __call__ is on the simulator's hot path
        self.lx: list[float] = np.log(ux).tolist()
        self.ly: list[float] = isotonic(_mean_by(inv, np.log(s))).tolist()
        self.lo, self.hi = float(ux[0]), float(ux[-1])
        self.lr: list[float] | None = None
        if reference is not None:
            r = np.asarray(reference, dtype=float)
            if len(r) != len(xs) or (r <= 0).any():
                raise ValueError("a curve's reference needs one value > 0 per point")
            self.lr = _mean_by(inv, np.log(r)).tolist()

    def __call__(self, x: float, ref_x: float | None = None) -> float:
        """Interpolated seconds at ``x`` clamped to the range; ``ref_x``: the reference's seconds at ``x``
        (required when the curve has a reference)."""
        lx, ly, lr = self.lx, self.ly, self.lr
        if len(lx) == 1:
            return math.exp(ly[0])
        u = min(max(math.log(x), lx[0]), lx[-1])
        i = min(bisect_right(lx, u) - 1, len(lx) - 2)
        w = (u - lx[i]) / (lx[i + 1] - lx[i])
        if lr is not None and lr[i + 1] - lr[i] > FLAT_LOG:
            if ref_x is None:
                raise ValueError("this curve interpolates in its reference's coordinate: pass ref_x")
            w = min(max((math.log(ref_x) - lr[i]) / (lr[i + 1] - lr[i]), 0.0), 1.0)
        return math.exp(ly[i] + w * (ly[i + 1] - ly[i]))

    def at(self, x: float, ref: Callable[[float], float], shape: Callable[[float], float] | None = None) -> float:
        """Seconds at ``x``; outside the range the edge value times ``ref(x) / ref(edge)``. ``shape``: the
        reference the curve interpolates in (default ``ref``); ``ref`` anchors the extrapolation."""
        if x < self.lo or x > self.hi:
            edge = self.lo if x < self.lo else self.hi
            return self._inside(edge, shape or ref) * ref(x) / ref(edge)
        return self._inside(x, shape or ref)

    def _inside(self, x: float, shape: Callable[[float], float]) -> float:
        return self(x, shape(x) if self.lr is not None else None)


class Grid:
    """Prefill attention per layer on (chunk tokens, cached context): see the module docstring. ``ref(tokens,
    context)``: the reference's seconds (non-decreasing in both)."""

    __slots__ = ("_cols", "_lg", "_lr", "_rise", "_rn", "_row_ref_shape", "cols", "lg", "lr", "ref_nodes", "rows")

    def __init__(
        self,
        tokens: ArrayLike,
        context: ArrayLike,
        seconds: ArrayLike,
        ref: Callable[[float, float], float],
        *,
        reference_between_rows: bool = False,
    ) -> None:
        n, c, s = (np.asarray(v, dtype=float) for v in (tokens, context, seconds))
        if len(n) == 0 or not len(n) == len(c) == len(s) or (n <= 0).any() or (c < 0).any() or (s <= 0).any():
            raise ValueError("a prefill grid needs matching tokens (> 0), context (>= 0) and seconds (> 0)")
        self.rows, self.cols = np.unique(n), np.unique(c)
        self.ref_nodes = np.array([[ref(r, col) for col in self.cols] for r in self.rows])
        lref = np.log(self.ref_nodes)
        g = np.empty((len(self.rows), len(self.cols)))
        for i, r in enumerate(self.rows):
            sel = n == r
            cu, inv = np.unique(c[sel], return_inverse=True)
            ly = isotonic(_mean_by(inv, np.log(s[sel])))
            at = np.searchsorted(self.cols, cu)  # measured contexts of this row, as column indices
            for j, col in enumerate(self.cols):
                if col < cu[0] or col > cu[-1]:  # anchored at the row's nearest point, the reference's shape
                    e = 0 if col < cu[0] else len(cu) - 1
                    g[i, j] = ly[e] + lref[i, j] - lref[i, at[e]]
                    continue
                k = min(int(np.searchsorted(cu, col, side="right")) - 1, max(len(cu) - 2, 0))
                if len(cu) == 1:
                    g[i, j] = ly[0]
                    continue
                d = lref[i, at[k + 1]] - lref[i, at[k]]
                if d > FLAT_LOG:
                    w = (lref[i, j] - lref[i, at[k]]) / d
                else:
                    w = (math.log1p(col) - math.log1p(cu[k])) / (math.log1p(cu[k + 1]) - math.log1p(cu[k]))
                g[i, j] = ly[k] + min(max(w, 0.0), 1.0) * (ly[k + 1] - ly[k])
        self.lg = np.maximum.accumulate(np.maximum.accumulate(g, axis=1), axis=0)
        self.lr = np.log(self.rows)
        self._lr, self._cols, self._lg = self.lr.tolist(), self.cols.tolist(), self.lg.tolist()
        self._rn: list[list[float]] = self.ref_nodes.tolist()
        self._row_ref_shape = reference_between_rows
        rise = self.ref_nodes[:, 1:] / self.ref_nodes[:, :-1] - 1.0  # reference rise across each column gap
        self._rise = [[(float(v), math.log1p(v) if v > FLAT_LOG else 0.0) for v in r] for r in rise]

    def _row_ref(self, row: int, j: int, f: float) -> float:
        """The reference at grid row ``row`` and the context ``f`` of the way from column ``j`` to ``j + 1``
        (linear in context)."""
        rn = self._rn[row]
        return rn[j] + f * (rn[j + 1] - rn[j]) if len(rn) > 1 else rn[0]

    def _inside(self, tokens: float, context: float, ref: Callable[[float, float], float] | None = None) -> float:
        lr, cols, lg = self._lr, self._cols, self._lg  # Python floats: on the simulator's hot path
        x = math.log(tokens)
        i = min(max(bisect_right(lr, x) - 1, 0), max(len(lr) - 2, 0))
        i1 = min(i + 1, len(lr) - 1)
        fx = (x - lr[i]) / (lr[i1] - lr[i]) if i1 > i else 0.0
        j = min(max(bisect_right(cols, context) - 1, 0), max(len(cols) - 2, 0))
        f = (context - cols[j]) / (cols[j + 1] - cols[j]) if len(cols) > 1 else 0.0
        if ref is not None and self._row_ref_shape and 0.0 < fx < 1.0:  # between rows: position in log reference
            lo, hi = self._row_ref(i, j, f), self._row_ref(i1, j, f)
            d = math.log(hi / lo)
            if d > FLAT_LOG:
                fx = min(max(math.log(ref(tokens, context) / lo) / d, 0.0), 1.0)
        h = h_i = -math.inf
        for m in range(i1 + 1):  # row m at this context; h: running maximum over rows (monotone in tokens)
            row = lg[m]
            if len(cols) == 1:
                g = row[0]
            else:
                rise, log_rise = self._rise[m][j]
                w = math.log1p(rise * f) / log_rise if rise > FLAT_LOG else f
                g = row[j] + w * (row[j + 1] - row[j])
            h = max(h, g)
            if m == i:
                h_i = h
        return math.exp(h_i * (1.0 - fx) + h * fx)

    def at(self, tokens: float, context: float, ref: Callable[[float, float], float]) -> float:
        tc = min(max(tokens, self.rows[0]), self.rows[-1])
        cc = min(max(context, self.cols[0]), self.cols[-1])
        v = self._inside(tc, cc, ref)
        if tc != tokens or cc != context:
            v *= ref(tokens, context) / ref(tc, cc)
        return v


def fit_decode(batch: ArrayLike, context: ArrayLike, seconds: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(batch sizes, intercepts a_b, slopes c_b)`` of decode-attention points of one layer: per batch size
    ``b``, ``t = a_b + c_b * b * ctx``, minimising the squared relative residuals ``(a + c b ctx) / t - 1`` over
    all points subject to ``a_b >= 0`` and ``0 <= c_1 <= c_2 <= ...`` (slopes non-decreasing in batch size, so
    that with a non-decreasing interpolation an extra sequence never makes an iteration cheaper). Solved exactly
    as non-negative least squares in ``(a_b, c_1, c_2 - c_1, ...)``. Where the unconstrained per-batch slopes
    decrease with batch size this pools them, down to the one-slope form ``a_b + c * b * ctx``."""
    from scipy.optimize import nnls  # scipy is a dependency; imported here to keep the module light

    b, x, t = (np.asarray(v, dtype=float) for v in (batch, context, seconds))
    bs, inv = np.unique(b, return_inverse=True)
    k = len(bs)
    m = np.zeros((len(t), 2 * k))
    m[np.arange(len(t)), inv] = 1.0
    for j in range(k):  # increment j of the slope applies to batch sizes j, j + 1, ...
        m[:, k + j] = b * x * (inv >= j)
    sol, _ = nnls(m / t[:, None], np.ones(len(t)))
    return bs, sol[:k], np.cumsum(sol[k:])

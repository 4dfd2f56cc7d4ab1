"""Interpolation of measured tables (agentreplay.perf.interp): the reference coordinate is exact on curves that
are a multiple of the reference (where log-log is not), steps with the reference, stays monotone; the prefill grid
completes rows and interpolates contexts in the reference's affine shape; the decode fit's per-batch slopes."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay.perf.interp import Curve, Grid, fit_decode


def fixed_plus_linear(x: float) -> float:
    """A fixed cost then proportional: convex in log-log, like a kernel's time against tokens."""
    return 5e-6 + 1e-7 * x


def test_reference_coordinate_is_exact_on_a_multiple_of_the_reference() -> None:
    knots = [1, 4, 16, 64, 256, 1024]
    secs = [3.0 * fixed_plus_linear(x) for x in knots]
    ref = Curve(knots, secs, [fixed_plus_linear(x) for x in knots])
    loglog = Curve(knots, secs)
    worst = 0.0
    for x in (2, 8, 32, 100, 500):
        want = 3.0 * fixed_plus_linear(x)
        assert ref(x, fixed_plus_linear(x)) == pytest.approx(want, rel=1e-12)
        worst = max(worst, abs(loglog(x) / want - 1))
    assert worst > 0.05  # log-log misses the fixed-cost-to-linear bend
    with pytest.raises(ValueError, match="ref_x"):
        ref(8)


def test_reference_steps_and_flat_reference_falls_back_to_log_x() -> None:
    tile = 64

    def tiled(x: float) -> float:
        return fixed_plus_linear(math.ceil(x / tile) * tile)

    knots = [32, 128, 256]
    c = Curve(knots, [tiled(x) for x in knots], [tiled(x) for x in knots])
    assert c.at(100, tiled) == pytest.approx(tiled(128), rel=1e-12)  # same tile as the next point
    assert c.at(65, tiled) == pytest.approx(tiled(128), rel=1e-12)
    assert c.at(64, tiled) == pytest.approx(tiled(32), rel=1e-12)  # same tile as the previous point
    flat = Curve([1, 100], [1e-5, 4e-5], [2e-6, 2e-6])
    assert flat(10, 2e-6) == pytest.approx(2e-5, rel=1e-12)  # geometric midpoint: log x


def test_extrapolation_anchors_with_ref_and_interpolation_uses_shape() -> None:
    c = Curve([10, 100], [1e-5, 1e-4], [1.0, 10.0])
    assert c.at(200, ref=lambda x: 3.0 * x, shape=lambda x: x / 10) == pytest.approx(2e-4, rel=1e-12)
    assert c.at(50, ref=lambda x: 1.0, shape=lambda x: x / 10) == pytest.approx(5e-5, rel=1e-12)


@settings(max_examples=50, deadline=None)
@given(secs=st.lists(st.floats(1e-6, 1e-2), min_size=2, max_size=8), bend=st.floats(0.0, 1e3))
def test_curve_is_monotone_for_any_data_and_monotone_reference(secs: list[float], bend: float) -> None:
    knots = [2**k for k in range(len(secs))]

    def ref(x: float) -> float:
        return bend + x

    c = Curve(knots, secs, [ref(x) for x in knots])
    sweep = [c.at(x, ref) for x in np.linspace(0.5, 2 * knots[-1], 300)]
    assert all(a <= b * (1 + 1e-12) for a, b in itertools.pairwise(sweep))


def prefill_ref(tokens: float, context: float) -> float:
    """Affine in context (FLOPs tokens * (context + tokens / 2)) plus a fixed cost."""
    return 8e-6 + 1e-12 * tokens * (context + tokens / 2)


def test_grid_is_exact_on_a_multiple_of_an_affine_reference() -> None:
    rows = [(n, c) for n in (16, 256) for c in (0, 512, 8192)] + [(64, 0), (64, 16384)]  # row 64: two contexts
    g = Grid([n for n, _ in rows], [c for _, c in rows], [2.0 * prefill_ref(n, c) for n, c in rows], prefill_ref)
    for n in (16, 256):
        for c in (100, 3000, 8000):  # between columns: the reference's affine shape in context, exact
            assert g.at(n, c, prefill_ref) == pytest.approx(2.0 * prefill_ref(n, c), rel=1e-9), (n, c)
    for c in (512, 8192):  # row 64 completed along context in the reference's shape
        assert g.at(64, c, prefill_ref) == pytest.approx(2.0 * prefill_ref(64, c), rel=1e-9), c


def test_grid_is_monotone_with_uneven_rows() -> None:
    pts = [(n, c) for n in (16, 32, 64, 128) for c in (0, 256, 4096)]
    noise = {16: 1.3, 32: 0.8, 64: 1.1, 128: 0.9}  # rows out of order relative to the reference
    secs = [prefill_ref(n, c) * noise[n] for n, c in pts]
    g = Grid([n for n, _ in pts], [c for _, c in pts], secs, prefill_ref)
    for c in (0, 100, 1000, 4096):
        tok = [g.at(n, c, prefill_ref) for n in range(16, 129, 3)]
        assert all(a <= b * (1 + 1e-12) for a, b in itertools.pairwise(tok)), c
    for n in (16, 40, 100):
        ctx = [g.at(n, c, prefill_ref) for c in range(0, 4097, 64)]
        assert all(a <= b * (1 + 1e-12) for a, b in itertools.pairwise(ctx)), n


def test_grid_rows_in_log_tokens_or_in_log_reference() -> None:
    """Between token rows the grid is linear in log tokens by default; with ``reference_between_rows`` in log
    reference, which is exact on a multiple of the reference; both stay monotone in tokens."""
    pts = [(n, c) for n in (16, 256) for c in (0, 4096)]
    secs = [3.0 * prefill_ref(n, c) for n, c in pts]
    logt = Grid([n for n, _ in pts], [c for _, c in pts], secs, prefill_ref)
    refr = Grid([n for n, _ in pts], [c for _, c in pts], secs, prefill_ref, reference_between_rows=True)
    for c in (0, 1000, 4096):
        want = 3.0 * prefill_ref(64, c)
        assert refr.at(64, c, prefill_ref) == pytest.approx(want, rel=1e-9), c
        lo, hi = 3.0 * prefill_ref(16, c), 3.0 * prefill_ref(256, c)
        assert logt.at(64, c, prefill_ref) == pytest.approx(math.sqrt(lo * hi), rel=1e-9), c  # halfway in log 16..256
        for g in (logt, refr):
            tok = [g.at(n, c, prefill_ref) for n in range(16, 257, 5)]
            assert all(a <= b * (1 + 1e-12) for a, b in itertools.pairwise(tok)), c


def test_fit_decode_recovers_per_batch_slopes() -> None:
    b, ctx = (v.ravel() for v in np.meshgrid([1, 4, 16, 64], [16, 256, 4096]))
    a = {1: 5e-6, 4: 7e-6, 16: 9e-6, 64: 2e-5}
    c = {1: 2e-9, 4: 3e-9, 16: 3e-9, 64: 4e-9}  # non-decreasing in batch size
    t = np.array([a[x] + c[x] * x * k for x, k in zip(b, ctx, strict=True)])
    bs, got_a, got_c = fit_decode(b, ctx, t)
    assert bs.tolist() == [1, 4, 16, 64]
    assert got_a == pytest.approx([a[x] for x in bs], rel=1e-6)
    assert got_c == pytest.approx([c[x] for x in bs], rel=1e-6)


def test_fit_decode_pools_decreasing_slopes() -> None:
    b, ctx = (v.ravel() for v in np.meshgrid([1, 8], [16, 1024, 8192]))
    c = {1: 4e-9, 8: 2e-9}  # the per-batch optimum decreases: the constrained fit pools to one slope
    t = np.array([1e-5 + c[x] * x * k for x, k in zip(b, ctx, strict=True)])
    _, _, got_c = fit_decode(b, ctx, t)
    assert got_c[0] == pytest.approx(got_c[1], rel=1e-9)
    assert 2e-9 < got_c[0] < 4e-9

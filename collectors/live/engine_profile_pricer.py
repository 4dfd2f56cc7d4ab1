"""A measured-table iteration pricer: fit a small linear model to a live engine's ``drive-profile`` output.

This is the path for hardware without a catalog entry (a GPU the roofline model does not know, or a CPU
engine): profile the engine with ``agentreplay drive-profile``, fit, and pass the pricer to
``agentreplay.sim.simulate(..., perf=pricer)``. It implements :class:`agentreplay.perf.model.IterationPricer`.

Model (seconds; every coefficient >= 0, so more work never costs less; fitted by least absolute deviations,
which shrug off the odd point measured while another process held the cores):

- decode-only step of ``n`` sequences whose KV contexts sum to ``S`` tokens::

      t = a0 + a1 * n + c * S            -> decode_coeffs(n) = (a0 + a1 * n, c)

  fitted to the ``decode_iteration`` rows (``batch_size`` = n, ``context_tokens`` = mean context per sequence,
  so S = n * context_tokens);
- a prefill item of ``chunk`` new tokens after ``prefix`` cached ones adds::

      p + b * chunk + d * chunk * (prefix + chunk / 2)

  where ``d``'s regressor is the attention work of the chunk (the same ``chunk * (prefix + chunk/2)`` the
  roofline model uses) and ``p`` is the per-request overhead beyond one engine step. The ``prefill_iteration``
  rows are TTFTs of lone requests (``max_tokens`` 1, no cache hit), fitted as ``q + b * N + d * N^2 / 2``; then
  ``p = max(q - a0 - a1, 0)``: the part of a lone request's TTFT that the decode intercept does not explain (HTTP,
  the API server's frontend, request setup). It is charged inside the iteration, which is what a simulator
  without a frontend can do; ``per_request_overhead=False`` drops it;
- a mixed iteration (prefill items and decodes) is ``a0 + a1 * n_decode + c * S + sum(prefill items)``: a
  prefilling sequence pays ``p`` instead of ``a1``.

Iteration time is therefore linear in every count and exactly ``A(n) + c * S`` when there is no prefill, as the
simulator's fast decode requires. The fit is stored in :attr:`ProfilePricer.coeffs` (and :meth:`to_dict`) and
its residuals in :attr:`ProfilePricer.fit_report`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
from scipy.optimize import nnls

PrefillItem = tuple[int, int] | tuple[int, int, bool]


@dataclass(frozen=True, slots=True)
class PricerCoeffs:
    """Fitted coefficients, seconds (per token / per token^2 / per sequence as named)."""

    a0: float  #: fixed cost of one engine step
    a1: float  #: per decoding sequence
    c: float  #: per KV-context token attended by a decoding sequence
    p: float  #: per prefill item (request overhead beyond a step)
    b: float  #: per prefill token
    d: float  #: per unit of prefill attention work chunk * (prefix + chunk/2)


#: A decode-step measurement below this share of the measured steps' 75th percentile is a streaming artefact
#: (vLLM's CPU build, sharing cores with its API server, can deliver a whole window's chunks in one burst: steps of
#: 15-40 us beside 5-8 ms ones), dropped before the fit. Physical reasoning, not tuned on an error: the steps of one
#: profile differ by batch and context, which moves a step by a few times, never by 100x.
ARTEFACT_SHARE: Final = 0.1


def _fit(x: np.ndarray, y: np.ndarray, iterations: int = 50) -> tuple[np.ndarray, float]:
    """Non-negative least *absolute* deviations (iteratively reweighted NNLS): a few outliers (a point measured
    while another process held the cores, or a streaming artefact near 0) barely move the fit, where least
    squares, and any fit of *relative* errors, would follow them. Returns (coefficients, median |relative
    residual|)."""
    w = np.ones_like(y)
    coef = np.zeros(x.shape[1])
    for _ in range(iterations):
        sw = np.sqrt(w)
        coef, _ = nnls(x * sw[:, None], y * sw)
        w = 1.0 / np.maximum(np.abs(x @ coef - y), 1e-6 * max(float(np.median(y)), 1e-12))
    rel = (x @ coef - y) / np.maximum(y, 1e-12)
    return coef, float(np.median(np.abs(rel))) if len(y) else math.nan


class ProfilePricer:
    """:class:`~agentreplay.perf.model.IterationPricer` from a measured ``component`` table; see the module doc."""

    def __init__(self, coeffs: PricerCoeffs, fit_report: dict[str, Any] | None = None) -> None:
        for k, v in asdict(coeffs).items():
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"pricer coefficient {k} = {v!r} must be finite and >= 0")
        self.coeffs = coeffs
        self.fit_report = fit_report or {}

    # ---- construction -------------------------------------------------------------------------------------
    @classmethod
    def from_component(cls, comp: pd.DataFrame, *, per_request_overhead: bool = True) -> ProfilePricer:
        """Fit to a measured ``component`` table holding ``prefill_iteration`` and ``decode_iteration`` rows."""
        dec = comp[comp["op"] == "decode_iteration"]
        pre = comp[comp["op"] == "prefill_iteration"]
        if len(dec) < 3 or len(pre) < 3:
            raise ValueError(
                f"need >= 3 decode_iteration and >= 3 prefill_iteration rows, got {len(dec)} and "
                f"{len(pre)}: run `agentreplay drive-profile` with more sizes"
            )
        # a decode step measured at a small fraction of the typical one is a streaming artefact (the API server
        # delivered the window's chunks back to back), not a step time: out of the fit, counted in the report
        yd_all = dec["seconds"].to_numpy(dtype=float)
        keep = yd_all >= ARTEFACT_SHARE * float(np.percentile(yd_all, 75))
        dropped = int((~keep).sum())
        if keep.sum() < 3:
            keep[:] = True  # too few real steps to tell: fit everything (the report's error shows it)
            dropped = 0
        dec = dec[keep]
        n = dec["batch_size"].to_numpy(dtype=float)
        ctx = dec["context_tokens"].to_numpy(dtype=float)
        yd = dec["seconds"].to_numpy(dtype=float)
        (a0, a1, c), rms_d = _fit(np.column_stack([np.ones_like(n), n, n * ctx]), yd)
        tok = pre["num_tokens"].to_numpy(dtype=float)
        yp = pre["seconds"].to_numpy(dtype=float)
        (q, b, d), rms_p = _fit(np.column_stack([np.ones_like(tok), tok, tok * tok / 2]), yp)
        p = max(q - a0 - a1, 0.0) if per_request_overhead else 0.0
        report = {
            "decode_rows": len(yd),
            "decode_rows_dropped_as_artefacts": dropped,
            "decode_median_abs_rel_err": rms_d,
            "prefill_rows": len(yp),
            "prefill_median_abs_rel_err": rms_p,
            "prefill_intercept_s": float(q),
            "per_request_overhead": per_request_overhead,
        }
        return cls(PricerCoeffs(float(a0), float(a1), float(c), float(p), float(b), float(d)), report)

    @classmethod
    def from_measured(cls, path: str | Path, **kw: Any) -> ProfilePricer:
        """Fit to the ``component.parquet`` that ``agentreplay drive-profile --out DIR`` wrote in ``DIR``."""
        p = Path(path)
        return cls.from_component(pd.read_parquet(p / "component.parquet" if p.is_dir() else p), **kw)

    # ---- IterationPricer ----------------------------------------------------------------------------------
    def _prefill_s(self, prefill: Sequence[PrefillItem]) -> float:
        k = self.coeffs
        total = 0.0
        for item in prefill:
            chunk, prefix = int(item[0]), int(item[1])
            if chunk < 1 or prefix < 0:
                raise ValueError(f"prefill item {item!r}: need chunk_tokens >= 1 and cached_prefix_tokens >= 0")
            total += k.p + k.b * chunk + k.d * chunk * (prefix + 0.5 * chunk)
        return total

    def iteration_time_s(self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int]) -> float:
        """Seconds for one iteration (0 when empty); see the module doc for the formula."""
        if not prefill and not decode_ctx:
            return 0.0
        a, c = self.decode_coeffs(len(decode_ctx))
        if not decode_ctx:
            a = self.coeffs.a0
        return a + c * sum(decode_ctx) + self._prefill_s(prefill)

    def decode_coeffs(self, n_seqs: int) -> tuple[float, float]:
        """``(A, c)``: a decode-only step of ``n_seqs`` sequences costs ``A + c * sum_ctx``."""
        return self.coeffs.a0 + self.coeffs.a1 * n_seqs, self.coeffs.c

    # ---- conveniences -------------------------------------------------------------------------------------
    def prefill_time_s(self, tokens: int, cached: int = 0) -> float:
        return self.iteration_time_s([(tokens, cached)], ())

    def decode_step_time_s(self, batch: int, ctx: int) -> float:
        a, c = self.decode_coeffs(batch)
        return a + c * batch * ctx

    def to_dict(self) -> dict[str, Any]:
        return {"coeffs": asdict(self.coeffs), "fit": self.fit_report}

    def __repr__(self) -> str:
        k = self.coeffs
        return (
            f"ProfilePricer(step={k.a0 * 1e3:.3f} ms + {k.a1 * 1e3:.3f} ms/seq + {k.c * 1e9:.3f} ns/ctx-token; "
            f"prefill {k.p * 1e3:.3f} ms + {k.b * 1e6:.3f} us/token + {k.d * 1e9:.4f} ns/attn-unit)"
        )

"""Maximum-likelihood fits of tool-gap durations (seconds), per tool class, with model choice and fit tests.

Model (DESIGN §5 "Tool-gap fitting"): a duration ``D`` is zero with probability ``p_zero`` (the fraction of
exact zeros: estimated gaps are floored at 0) and otherwise follows a continuous family on ``(0, inf)``.
``p_zero`` is its own MLE (the zero count / n), so it adds one parameter (when there are zeros) and the same
log-likelihood term ``n0 ln p0 + n+ ln(1 - p0)`` to every candidate; only the positive part decides the family.

Candidates, each fitted by maximum likelihood with the location fixed at 0 (durations start at 0 s):

- ``exponential``: closed form (scale = mean).
- ``lognormal``: closed form (mean and population sd of ``ln x``).
- ``gamma``, ``weibull_min``: ``scipy.stats.<family>.fit(x, floc=0)``.
- ``pareto``: closed form (scale = min x, b = n / sum ln(x / min x)). A pure power law on the whole positive
  part; a lognormal body with a Pareto tail was not added because the two-lognormal mixture already
  covers heavy right tails and keeps a smooth density (the splice point of a body/tail model is a
  non-regular parameter that breaks the AIC comparison).
- ``lognormal_mix2``: two-component Gaussian mixture on ``ln x`` by EM (numpy), best of four quantile-based
  starts; component sd floored at :data:`SIGMA_FLOOR` so a component cannot collapse onto the tied values of
  millisecond-rounded measurements. Only for classes with at least :data:`MIX_MIN_N` positive values.

Choice: lowest AIC (BIC reported too). Goodness of fit on the positive part: KS statistic and p-value against
the fitted CDF (``scipy.stats.kstest``; the p-value is optimistic because the parameters were estimated from the
same data, and millisecond ties inflate the statistic), and the Anderson-Darling statistic of the chosen family:
``scipy.stats.anderson`` (p-value interpolated from its tables, which re-estimates the parameters and clips the
p-value to the tables' range) for lognormal (``norm`` on ``ln x``), exponential and Weibull; for gamma, Pareto
and the mixture ``A^2`` is computed from the fitted CDF and no p-value is available (``ad_p`` null).

Classes with fewer than :data:`MIN_N` positive values, or fewer than 2 distinct ones, get only the
one-parameter exponential (its MLE matches the mean; a shape cannot be estimated from so little), so every
class with a positive duration has an entry. A class whose durations are all zero is not fitted; the sampler
falls back to ``overall`` for it.

A class with fewer than :data:`MIN_CLASS_N` durations (zeros included) is not given a model of its own either:
``validation.tools.model.fit_tools`` pools it with ``overall`` (the sampler draws its gaps from ``overall``) and
reports it as "too few samples" with its count. With so few values the fitted quantiles would be the family's
assumption, not the data's (one 24.66 s value gives an exponential with median 17.1 s and p90 56.8 s).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from scipy import stats

from agentreplay.sim.tools_generative import FAMILIES, ClassDist

CANDIDATES: Final = ("exponential", "lognormal", "gamma", "weibull_min", "pareto", "lognormal_mix2")
MIN_CLASS_N: Final = 10  #: durations a class needs for a model of its own (fewer: pooled with overall)
MIN_N: Final = 5  #: positive durations needed to try every candidate (fewer: exponential only)
MIX_MIN_N: Final = 50  #: positive durations needed to try the five-parameter mixture
SIGMA_FLOOR: Final = 0.05  #: minimum component sd of ln(seconds) in the mixture EM
_SCIPY_AD: Final = {"lognormal": "norm", "exponential": "expon", "weibull_min": "weibull_min"}


@dataclass(frozen=True, slots=True)
class Fit:
    """One candidate family fitted to one class. ``loglik`` includes the zero mass term."""

    family: str
    params: dict[str, float]
    k: int  #: free parameters, p_zero included when there are zeros
    loglik: float
    aic: float
    bic: float
    ks: float
    ks_p: float


@dataclass(frozen=True, slots=True)
class ClassFit:
    """All candidates of one class (sorted by AIC), the chosen one, and its fit statistics (seconds)."""

    tool_class: str
    n: int
    n_zero: int
    fits: list[Fit]
    ad: float
    ad_p: float | None
    ad_method: str
    empirical: dict[str, float] = field(default_factory=dict)  #: mean_s, median_s, p90_s of the data

    @property
    def chosen(self) -> Fit:
        return self.fits[0]

    @property
    def p_zero(self) -> float:
        return self.n_zero / self.n

    def dist(self) -> ClassDist:
        return ClassDist(self.chosen.family, self.chosen.params, self.p_zero, self.n)

    def entry(self) -> dict[str, Any]:
        """The class entry of the model file (see ``agentreplay.sim.tools_generative``)."""
        d, c = self.dist(), self.chosen
        mean = d.mean()
        return {
            "family": c.family,
            "params": c.params,
            "p_zero": self.p_zero,
            "n": self.n,
            "aic": c.aic,
            "bic": c.bic,
            "ks": c.ks,
            "ks_p": c.ks_p,
            "ad": self.ad,
            "median_s": float(d.ppf(0.5)),
            "p90_s": float(d.ppf(0.9)),
            "mean_s": mean if math.isfinite(mean) else None,
            "ad_p": self.ad_p,
            "ad_method": self.ad_method,
            "n_zero": self.n_zero,
            "empirical": self.empirical,
            "candidates": {f.family: {"aic": f.aic, "bic": f.bic, "ks": f.ks} for f in self.fits},
        }


def _norm_logpdf(x: np.ndarray, mu: float, sigma: float) -> np.ndarray:
    return -0.5 * ((x - mu) / sigma) ** 2 - math.log(sigma) - 0.5 * math.log(2 * math.pi)


def _em(
    lx: np.ndarray, state: tuple[float, np.ndarray, np.ndarray], iters: int, tol: float
) -> tuple[float, tuple[float, np.ndarray, np.ndarray]]:
    """Up to ``iters`` EM steps from ``(w, mu[2], sigma[2])``; returns (log-likelihood, state), -inf if a
    weight degenerates."""
    w, mu, sig = state[0], state[1].copy(), state[2].copy()
    prev, ll = -math.inf, -math.inf
    for _ in range(iters):
        la = math.log(w) + _norm_logpdf(lx, mu[0], sig[0])
        lb = math.log1p(-w) + _norm_logpdf(lx, mu[1], sig[1])
        tot = np.logaddexp(la, lb)
        ll = float(tot.sum())
        r = np.exp(la - tot)
        w = float(r.mean())
        if not 1e-6 < w < 1 - 1e-6:
            return -math.inf, (w, mu, sig)
        for j, rj in enumerate((r, 1 - r)):
            s = rj.sum()
            mu[j] = float((rj * lx).sum() / s)
            sig[j] = max(math.sqrt(float((rj * (lx - mu[j]) ** 2).sum() / s)), SIGMA_FLOOR)
        if ll - prev < tol * max(1.0, abs(ll)):
            break
        prev = ll
    return ll, (w, mu, sig)


def fit_lognormal_mix2(logx: np.ndarray, *, max_iter: int = 500, tol: float = 1e-9) -> dict[str, float] | None:
    """EM for a two-component normal mixture on ``ln x``; components ordered ``mu1 <= mu2``.

    Starts: means at the (25, 75), (10, 90), (5, 50) and (50, 95) percentiles, sd half the sample sd, w 0.5.
    Each start runs 25 steps; the one with the highest log-likelihood then runs to convergence (relative
    log-likelihood change < ``tol``, at most ``max_iter`` steps: on unimodal data EM crawls, and the last
    digits do not change the AIC ranking). None when every start degenerates (a weight -> 0).
    """
    lx = np.asarray(logx, dtype=float)
    sd = max(float(lx.std()), SIGMA_FLOOR)
    runs = []
    for qa, qb in ((25, 75), (10, 90), (5, 50), (50, 95)):
        start = (0.5, np.percentile(lx, [qa, qb]).astype(float), np.array([sd / 2, sd / 2]))
        runs.append(_em(lx, start, 25, tol))
    ll, state = max(runs, key=lambda r: r[0])
    if not math.isfinite(ll):
        return None
    ll, (w, mu, sig) = _em(lx, state, max_iter, tol)
    if not math.isfinite(ll):
        return None
    lo = 0 if mu[0] <= mu[1] else 1
    hi = 1 - lo
    return {
        "w": w if lo == 0 else 1 - w,
        "mu1": float(mu[lo]),
        "sigma1": float(sig[lo]),
        "mu2": float(mu[hi]),
        "sigma2": float(sig[hi]),
    }


def estimate(family: str, x: np.ndarray) -> dict[str, float] | None:
    """MLE parameters of ``family`` for positive durations ``x`` (location fixed at 0); None if it fails."""
    lx = np.log(x)
    if family == "exponential":
        return {"scale": float(x.mean())}
    if family == "lognormal":
        return {"mu": float(lx.mean()), "sigma": float(lx.std())}
    if family == "pareto":
        xm = float(x.min())
        s = float((lx - math.log(xm)).sum())
        return {"b": len(x) / s, "scale": xm} if s > 0 else None
    if family == "lognormal_mix2":
        return fit_lognormal_mix2(lx) if len(x) >= MIX_MIN_N else None
    dist = {"gamma": stats.gamma, "weibull_min": stats.weibull_min}[family]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            shape, _, scale = dist.fit(x, floc=0)
        except (ValueError, RuntimeError, FloatingPointError):
            return None
    if not (np.isfinite(shape) and np.isfinite(scale) and shape > 0 and scale > 0):
        return None
    return {"shape" if family == "gamma" else "c": float(shape), "scale": float(scale)}


def anderson_darling(x: np.ndarray, fit: Fit) -> tuple[float, float | None, str]:
    """``(A^2, p-value or None, method)`` for the chosen family on positive durations ``x``."""
    dist_name = _SCIPY_AD.get(fit.family)
    if dist_name is not None:
        data = np.log(x) if fit.family == "lognormal" else x
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                res = stats.anderson(data, dist_name, method="interpolate")
                how = (
                    f"scipy.stats.anderson({'ln x' if fit.family == 'lognormal' else 'x'}, {dist_name!r}), "
                    "parameters re-estimated by scipy, p interpolated (clipped to its table)"
                )
                return float(res.statistic), float(res.pvalue), how
            except (ValueError, RuntimeError, FloatingPointError):
                pass  # e.g. scipy's Weibull table does not cover shape < 2: fall through to A^2 by hand
    xs = np.sort(x)
    n = len(xs)
    cdf = np.clip(FAMILIES[fit.family].cdf(fit.params, xs), 1e-12, 1 - 1e-12)
    i = np.arange(1, n + 1)
    a2 = -n - float(np.mean((2 * i - 1) * (np.log(cdf) + np.log1p(-cdf[::-1]))))
    return a2, None, "A^2 from the fitted CDF; p-value not available for this family"


def fit_class(
    durations: np.ndarray, tool_class: str = "all", candidates: tuple[str, ...] = CANDIDATES
) -> ClassFit | None:
    """Fit every candidate to one class's durations (seconds, >= 0); None when none is positive."""
    d = np.asarray(durations, dtype=float)
    d = d[np.isfinite(d)]
    if (d < 0).any():
        raise ValueError(f"{tool_class}: negative durations")
    x = d[d > 0]
    n, n0 = len(d), int((d == 0).sum())
    if len(x) == 0:
        return None
    if len(x) < MIN_N or np.unique(x).size < 2:
        candidates = ("exponential",)
    zero_ll = n0 * math.log(n0 / n) + len(x) * math.log1p(-n0 / n) if n0 else 0.0
    fits = []
    for fam in candidates:
        params = estimate(fam, x)
        if params is None or FAMILIES[fam].check(params) is not None:
            continue
        ll = float(FAMILIES[fam].logpdf(params, x).sum()) + zero_ll
        if not math.isfinite(ll):
            continue
        k = len(FAMILIES[fam].params) + (1 if n0 else 0)
        ks = stats.kstest(x, lambda v, f=fam, p=params: FAMILIES[f].cdf(p, v))  # type: ignore[misc]
        fits.append(
            Fit(fam, params, k, ll, 2 * k - 2 * ll, k * math.log(n) - 2 * ll, float(ks.statistic), float(ks.pvalue))
        )
    fits.sort(key=lambda f: f.aic)
    ad, ad_p, how = anderson_darling(x, fits[0])
    emp = {"mean_s": float(d.mean()), "median_s": float(np.median(d)), "p90_s": float(np.quantile(d, 0.9))}
    return ClassFit(tool_class, n, n0, fits, ad, ad_p, how, emp)


def fit_classes(tool_class: np.ndarray, duration_s: np.ndarray) -> tuple[dict[str, ClassFit], ClassFit, list[str]]:
    """Per-class fits, the pooled ``overall`` fit and the classes left unfitted (no positive duration)."""
    cls = np.asarray(tool_class, dtype=object)
    dur = np.asarray(duration_s, dtype=float)
    fits, skipped = {}, []
    for c in sorted(set(cls.tolist())):
        f = fit_class(dur[cls == c], c)
        if f is None:
            skipped.append(c)
        else:
            fits[c] = f
    overall = fit_class(dur, "overall")
    if overall is None:
        raise ValueError("no positive duration to fit")
    return fits, overall, skipped

"""Provider cost per task under prompt-cache pricing, for two cache TTL tiers, and their break-even.

Billing model (per program, per TTL tier; prices from :class:`Prices`, a config):

- The agent marks the end of every prompt as a cache breakpoint (as agents that use prompt caching do: each call
  caches its whole prompt), so turn ``t``'s prompt of ``I_t`` tokens, once billed, is a cache entry; the entry's
  lifetime is refreshed each time it is read (Anthropic: "the cache is refreshed for no additional cost each time
  the cached content is used").
- The prefix turn ``t`` can read is the previous prompt: ``P_t = min(I_{t-1}, R_t)`` with ``R_t`` the tokens of
  turn ``t``'s prompt that extend the previous turn's context (the trace's ``reused_tokens`` when the trace is
  given, else ``I_t``: append-only context, DESIGN §1). Turn 0 has ``P_0 = 0``.
- Cache age at turn ``t``: ``age_t = release_s[t] - first_token_s[t-1]``: from the end of the previous call's
  prefill (when its prompt was written or read) to the moment turn ``t`` is sent; the previous call's decode and
  the tool gap, on the run's timeline.
- Turn ``t`` with ``P_t > 0`` and ``age_t <= TTL``: ``P_t`` tokens are cache reads, ``I_t - P_t`` cache writes
  at the tier's write price. Otherwise (first turn, nothing reusable, or the entry expired) the whole prompt is
  written again: a full-price prefill plus the write premium. A prompt below ``min_cacheable_tokens`` is not
  cached (fresh input), so the next turn has nothing to read. Output tokens at the output price.
- Each program is billed on its own: a system prompt shared by all programs, which the provider may serve from
  one cache entry across programs, is billed as part of each program's first prompt (an upper bound; on the
  bundled trace the shared prefix is about 1% of the prompt tokens).

Break-even between the tiers (prices per token: ``w5``, ``w1`` the 5-minute and 1-hour writes, ``r`` the read).
With ``W`` the tokens written when every entry is alive (first prompts plus each turn's new tokens), ``R`` the
readable tokens (sum of ``P_t``) and ``R_{>T}`` those whose age exceeds ``T``:

    cost_5m = w5 (W + R_{>5m}) + r (R - R_{>5m}) + rest,   cost_1h = w1 (W + R_{>1h}) + r (R - R_{>1h}) + rest

so with ``s = R_{>5m} / R`` (the token-weighted share of long gaps) the 1-hour tier is cheaper exactly when

    s > s* = ((w1 - w5) W + (w1 - r) R_{>1h}) / ((w5 - r) R)

(:func:`break_even`). ``s`` equals the share of gaps over 5 minutes when the gaps are of equal size.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

MTOK = 1e6


class PricesError(ValueError):
    """A price file that cannot be used; the message names the file, field and value."""


@dataclass(frozen=True, slots=True)
class Prices:
    """Provider prices in USD per million tokens, and the two cache TTLs. A config: pass ``--prices FILE``.

    Defaults: Claude Sonnet 4.5 list prices from Anthropic's pricing page
    (https://platform.claude.com/docs/en/about-claude/pricing, "Prompt caching" table: base input $3 / MTok,
    5-minute cache writes $3.75 (1.25x), 1-hour cache writes $6 (2x), cache hits and refreshes $0.30 (0.1x),
    output $15), read on 2026-12-02 through copies of that table (the official page itself was not reachable
    from this machine). The minimum cacheable prompt (1,024 tokens for Sonnet models) is from Anthropic's prompt
    caching documentation (https://platform.claude.com/docs/en/build-with-claude/prompt-caching).
    """

    name: str = "claude-sonnet-4.5"  #: label for tables
    input_per_mtok: float = 3.0  #: fresh (uncached) input, USD per million tokens
    output_per_mtok: float = 15.0  #: output, USD per million tokens
    cache_write_5m_per_mtok: float = 3.75  #: cache write with the 5-minute TTL (1.25x input)
    cache_write_1h_per_mtok: float = 6.0  #: cache write with the 1-hour TTL (2x input)
    cache_read_per_mtok: float = 0.30  #: cache read (hit or refresh), either TTL (0.1x input)
    ttl_5m_s: float = 300.0  #: lifetime of a 5-minute entry since its last use, seconds
    ttl_1h_s: float = 3600.0  #: lifetime of a 1-hour entry since its last use, seconds
    min_cacheable_tokens: int = 1024  #: prompts shorter than this are not cached (fresh input)
    source: str = (
        "Anthropic pricing page (platform.claude.com/docs/en/about-claude/pricing), Claude Sonnet 4.5, read 2026-12-02"
    )
    #: deployment prices for ``agentreplay plan --prices``: USD per GPU-hour, by catalogue GPU name
    #: (``agentreplay catalog``); empty (the default): GPUs are not priced and plans rank in GPU-hours
    gpu_per_hour: dict[str, float] = field(default_factory=dict)
    dram_per_gib_hour: float | None = None  #: host DRAM (a KV tier), USD per GiB-hour; None: not priced
    cxl_per_gib_hour: float | None = None  #: CXL memory (a KV tier), USD per GiB-hour; None: not priced

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("name", "source"):
                if not isinstance(v, str):
                    raise PricesError(f"{f.name} = {v!r}: must be a string")
            elif f.name == "gpu_per_hour":
                if not isinstance(v, dict):
                    raise PricesError(f"gpu_per_hour = {v!r}: must be a table of GPU name = USD per GPU-hour")
                for gpu, price in v.items():
                    if not _price_ok(price):
                        raise PricesError(f"gpu_per_hour.{gpu} = {price!r}: must be a number >= 0")
            elif v is None and f.name in _OPTIONAL:
                continue
            elif not _price_ok(v):
                raise PricesError(f"{f.name} = {v!r}: must be a number >= 0")
        if not self.ttl_5m_s < self.ttl_1h_s:
            raise PricesError(f"ttl_5m_s = {self.ttl_5m_s} must be below ttl_1h_s = {self.ttl_1h_s}")
        if not self.cache_read_per_mtok < self.cache_write_5m_per_mtok:
            raise PricesError(
                f"cache_read_per_mtok = {self.cache_read_per_mtok} must be below "
                f"cache_write_5m_per_mtok = {self.cache_write_5m_per_mtok}"
            )

    def tiers(self) -> dict[str, tuple[float, float]]:
        """``{tier: (ttl_s, write_per_mtok)}`` for the two TTL tiers."""
        return {
            "5m": (self.ttl_5m_s, self.cache_write_5m_per_mtok),
            "1h": (self.ttl_1h_s, self.cache_write_1h_per_mtok),
        }


#: :class:`Prices` fields that may be left out of a file and stay unpriced (None)
_OPTIONAL = frozenset({"dram_per_gib_hour", "cxl_per_gib_hour"})


def _price_ok(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v) and v >= 0


def load_prices(path: str | Path) -> Prices:
    """:class:`Prices` from a TOML file with a ``[prices]`` table (fields as in :class:`Prices`; omitted ones keep
    their defaults). ``agentreplay plan`` reads the deployment prices of the same table: ``gpu_per_hour`` (a
    table, GPU name = USD per GPU-hour, e.g. ``gpu_per_hour = { h100-sxm = 2.5 }`` or a ``[prices.gpu_per_hour]``
    table), ``dram_per_gib_hour`` and ``cxl_per_gib_hour``."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PricesError(f"{p}: {exc}") from None
    table = data.get("prices")
    if not isinstance(table, dict):
        raise PricesError(f"{p}: no [prices] table")
    known = {f.name for f in fields(Prices)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise PricesError(f"{p}: [prices] unknown field(s) {unknown}; known: {sorted(known)}")
    try:
        return Prices(**table)
    except PricesError as exc:
        raise PricesError(f"{p}: [prices] {exc}") from None


#: One line per :class:`Prices` field, written beside it by :func:`prices_toml`.
FIELD_DOCS = {
    "name": "label for tables",
    "input_per_mtok": "fresh (uncached) input, USD per million tokens",
    "output_per_mtok": "output, USD per million tokens",
    "cache_write_5m_per_mtok": "cache write, 5-minute TTL (Anthropic: 1.25x input)",
    "cache_write_1h_per_mtok": "cache write, 1-hour TTL (Anthropic: 2x input)",
    "cache_read_per_mtok": "cache hit or refresh, either TTL (Anthropic: 0.1x input)",
    "ttl_5m_s": "lifetime of a 5-minute entry since its last use, seconds",
    "ttl_1h_s": "lifetime of a 1-hour entry since its last use, seconds",
    "min_cacheable_tokens": "prompts shorter than this are not cached",
    "source": "where the numbers come from",
    "gpu_per_hour": "agentreplay plan: USD per GPU-hour by catalogue GPU name, e.g. { h100-sxm = 2.5 }",
    "dram_per_gib_hour": "agentreplay plan: host DRAM KV tier, USD per GiB-hour",
    "cxl_per_gib_hour": "agentreplay plan: CXL KV tier, USD per GiB-hour",
}


def prices_toml(prices: Prices) -> str:
    """``prices`` as the TOML :func:`load_prices` reads, each field with its meaning."""
    lines = [
        "# Provider prices and cache TTLs for `agentreplay tasks --prices FILE`: a config, edit it for your",
        "# provider and model. These are the defaults (agentreplay.fleet.cost.Prices): Claude Sonnet 4.5 list",
        "# prices of Anthropic's pricing page, https://platform.claude.com/docs/en/about-claude/pricing",
        "# (prompt-caching table), read on 2026-12-02 through copies of that table; the minimum cacheable",
        "# prompt from https://platform.claude.com/docs/en/build-with-claude/prompt-caching.",
        "# `agentreplay plan --prices FILE` reads gpu_per_hour, dram_per_gib_hour and cxl_per_gib_hour (USD per",
        "# GPU-hour / GiB-hour): give your own; without them plans are ranked in GPU-hours.",
        "[prices]",
    ]
    for f in fields(Prices):
        v = getattr(prices, f.name)
        if v is None:  # TOML has no null: an unpriced tier is left out (commented)
            lines.append(f"# {f.name} = 0.0  # {FIELD_DOCS[f.name]} (not priced)")
        elif isinstance(v, dict):
            table = ", ".join(f'"{k}" = {float(x)!r}' for k, x in v.items())
            lines.append(f"{f.name} = {{ {table} }}" + f"  # {FIELD_DOCS[f.name]}")
        else:
            lines.append(
                (f"{f.name} = {v!r}" if not isinstance(v, str) else f'{f.name} = "{v}"') + f"  # {FIELD_DOCS[f.name]}"
            )
    return "\n".join(lines) + "\n"


def turn_cache_view(turns: pd.DataFrame, reused_tokens: np.ndarray | None = None) -> pd.DataFrame:
    """Per turn: ``readable_tokens`` (``P_t``) and ``cache_age_s`` (NaN on a program's first turn).

    ``turns`` sorted by program, then turn_idx (as :func:`agentreplay.fleet.outputs.read_output` returns them);
    ``reused_tokens``: the trace's per-turn reuse aligned with ``turns`` (None: append-only context)."""
    inp = turns["input_tokens"].to_numpy(np.int64)
    first = (turns["program_id"] != turns["program_id"].shift()).to_numpy()
    prev_in = np.r_[0, inp[:-1]]
    reuse = inp if reused_tokens is None else np.asarray(reused_tokens, dtype=np.int64)
    readable = np.where(first, 0, np.minimum(prev_in, np.minimum(reuse, inp)))
    prev_first_token = np.r_[np.nan, turns["first_token_s"].to_numpy(float)[:-1]]
    age = np.where(first, np.nan, turns["release_s"].to_numpy(float) - prev_first_token)
    return pd.DataFrame(
        {
            "program_id": turns["program_id"].to_numpy(),
            "turn_idx": turns["turn_idx"].to_numpy(),
            "input_tokens": inp,
            "output_tokens": turns["output_tokens"].to_numpy(np.int64),
            "prev_input_tokens": np.where(first, 0, prev_in),
            "readable_tokens": readable,
            "cache_age_s": age,
        }
    )


def _cacheable(view: pd.DataFrame, prices: Prices) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(input, readable, age, cacheable)`` per turn: a prompt below the minimum is not cached, so the next turn
    has nothing to read from it."""
    inp = view["input_tokens"].to_numpy(np.int64)
    cacheable = inp >= prices.min_cacheable_tokens
    prev_cached = view["prev_input_tokens"].to_numpy(np.int64) >= prices.min_cacheable_tokens
    readable = np.where(prev_cached, view["readable_tokens"].to_numpy(np.int64), 0)
    return inp, readable, view["cache_age_s"].to_numpy(float), cacheable


def bill_turns(view: pd.DataFrame, prices: Prices) -> pd.DataFrame:
    """Tokens per billing class and USD per turn for each tier (columns ``{tier}_read`` / ``_write`` /
    ``_fresh`` tokens and ``{tier}_usd``) plus ``nocache_usd`` (every input token fresh)."""
    inp, readable, age, cacheable = _cacheable(view, prices)
    out = view["output_tokens"].to_numpy(np.int64)
    res = view[["program_id", "turn_idx"]].copy()
    out_usd = out * prices.output_per_mtok / MTOK
    res["nocache_usd"] = inp * prices.input_per_mtok / MTOK + out_usd
    for tier, (ttl, write) in prices.tiers().items():
        alive = (readable > 0) & (age <= ttl) & cacheable  # NaN age (first turn) compares False
        read = np.where(alive, readable, 0)
        wrote = np.where(cacheable, inp - read, 0)
        fresh = np.where(cacheable, 0, inp)
        res[f"{tier}_read"], res[f"{tier}_write"], res[f"{tier}_fresh"] = read, wrote, fresh
        res[f"{tier}_expired"] = (readable > 0) & cacheable & ~(age <= ttl)
        res[f"{tier}_usd"] = (
            read * prices.cache_read_per_mtok + wrote * write + fresh * prices.input_per_mtok
        ) / MTOK + out_usd
    return res


def program_costs(bill: pd.DataFrame) -> pd.DataFrame:
    """Per program: turns, expired gaps per tier, USD without caching and per tier, the cheaper tier."""
    g = bill.groupby("program_id", sort=False)
    df = pd.DataFrame(
        {
            "turns": g.size(),
            "gaps_expired_5m": g["5m_expired"].sum(),
            "gaps_expired_1h": g["1h_expired"].sum(),
            "nocache_usd": g["nocache_usd"].sum(),
            "cost_5m_usd": g["5m_usd"].sum(),
            "cost_1h_usd": g["1h_usd"].sum(),
        }
    ).reset_index()
    df["cheaper_tier"] = np.where(df["cost_1h_usd"] < df["cost_5m_usd"], "1h", "5m")
    return df


def break_even(view: pd.DataFrame, prices: Prices) -> dict[str, Any]:
    """The quantities of the break-even formula (module docstring) for the whole run, and the verdict."""
    inp, readable, age, cacheable = _cacheable(view, prices)
    inp, readable, age = inp[cacheable], readable[cacheable], age[cacheable]
    w_tokens = int((inp - readable).sum())
    r_tokens = int(readable.sum())
    reusable = readable > 0
    r_5m = int(readable[reusable & ~(age <= prices.ttl_5m_s)].sum())
    r_1h = int(readable[reusable & ~(age <= prices.ttl_1h_s)].sum())
    w5, w1, r = prices.cache_write_5m_per_mtok, prices.cache_write_1h_per_mtok, prices.cache_read_per_mtok
    s_star = ((w1 - w5) * w_tokens + (w1 - r) * r_1h) / ((w5 - r) * r_tokens) if r_tokens else float("nan")
    s = r_5m / r_tokens if r_tokens else float("nan")
    gaps = int(reusable.sum())
    return {
        "formula": "s* = ((w1 - w5) W + (w1 - r) R_{>1h}) / ((w5 - r) R); the 1-hour tier is cheaper when s > s*",
        "written_tokens_W": w_tokens,
        "readable_tokens_R": r_tokens,
        "readable_over_5m_tokens": r_5m,
        "readable_over_1h_tokens": r_1h,
        "gaps": gaps,
        "gaps_over_5m": int((reusable & ~(age <= prices.ttl_5m_s)).sum()),
        "gaps_over_1h": int((reusable & ~(age <= prices.ttl_1h_s)).sum()),
        "share_over_5m_tokens_s": s,
        "share_over_5m_count": (int((reusable & ~(age <= prices.ttl_5m_s)).sum()) / gaps if gaps else float("nan")),
        "break_even_share_s_star": s_star,
        "cheaper_tier": "1h" if s > s_star else "5m",
    }


def cost_vs_share(
    be: dict[str, Any], prices: Prices, n_programs: int, rest_usd_total: float, shares: np.ndarray
) -> pd.DataFrame:
    """USD per 1,000 tasks for each tier as the long-gap share ``s`` varies (W, R, R_{>1h} as measured):
    the lines behind the break-even figure. ``rest_usd_total``: what does not depend on the tier (output and
    uncacheable prompts), summed over the run."""
    w, r_tok, r_1h = be["written_tokens_W"], be["readable_tokens_R"], be["readable_over_1h_tokens"]
    per_k = 1000.0 / max(n_programs, 1) / MTOK
    c5 = prices.cache_write_5m_per_mtok * (w + shares * r_tok) + prices.cache_read_per_mtok * (1 - shares) * r_tok
    c1 = prices.cache_write_1h_per_mtok * (w + r_1h) + prices.cache_read_per_mtok * (r_tok - r_1h)
    extra = rest_usd_total * 1000.0 / max(n_programs, 1)
    return pd.DataFrame(
        {
            "share_over_5m": shares,
            "usd_per_1000_5m": c5 * per_k + extra,
            "usd_per_1000_1h": np.full_like(shares, c1 * per_k) + extra,
        }
    )

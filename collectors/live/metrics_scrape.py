"""Engine metrics from a Prometheus ``/metrics`` endpoint: a small text-format parser and vLLM snapshots.

Only the Prometheus text exposition format (0.0.4, what vLLM serves) is parsed: ``# HELP`` / ``# TYPE``
comments, and sample lines ``name{label="value",...} value [timestamp]`` with ``\\\\``, ``\\"`` and ``\\n``
escapes in label values. Unparseable lines are skipped and counted, never fatal (metrics are auxiliary).

vLLM names read (summed over label sets, i.e. over engines of a data-parallel server; for each quantity the first
name present wins, so a deprecated alias exposed next to its successor is not counted twice):

- prefix cache **token** counters: ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``
  (v1), else the ``vllm:gpu_prefix_cache_*`` names of earlier v1 releases;
- ``vllm:num_preemptions_total`` (v1; ``vllm:num_preemptions`` in some releases);
- ``vllm:prompt_tokens_total`` / ``vllm:generation_tokens_total`` (sanity checks of what the driver sent);
- gauges ``vllm:kv_cache_usage_perc`` (else ``vllm:gpu_cache_usage_perc``; a fraction in [0, 1] despite the
  name), ``vllm:num_requests_running``, ``vllm:num_requests_waiting``;
- every ``*_info`` metric's labels (``vllm:cache_config_info`` carries ``num_gpu_blocks``, ``block_size``...).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')

COUNTERS: dict[str, tuple[str, ...]] = {
    "prefix_cache_queries_tokens": (
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:prefix_cache_queries",
        "vllm:gpu_prefix_cache_queries",
    ),
    "prefix_cache_hits_tokens": (
        "vllm:prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:prefix_cache_hits",
        "vllm:gpu_prefix_cache_hits",
    ),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "vllm:prompt_tokens"),
    "generation_tokens": ("vllm:generation_tokens_total", "vllm:generation_tokens"),
}
GAUGES: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "num_requests_running": ("vllm:num_requests_running",),
    "num_requests_waiting": ("vllm:num_requests_waiting",),
}


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def _unescape(v: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}.get(m.group(1), m.group(0)), v)


def parse_prometheus(text: str) -> tuple[list[Sample], int]:
    """``(samples, n_bad_lines)`` of a Prometheus text exposition."""
    out, bad = [], 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            bad += 1
            continue
        name, body, value = m.groups()
        labels: dict[str, str] = {}
        if body:
            inner, pos = body[1:-1], 0
            while pos < len(inner):
                lm = _LABEL.match(inner, pos)
                if not lm:
                    break
                labels[lm.group(1)] = _unescape(lm.group(2))
                pos = lm.end()
            if inner[pos:].strip():
                bad += 1
                continue
        try:
            v = float(value)  # accepts NaN, +Inf, -Inf as Prometheus writes them
        except ValueError:
            bad += 1
            continue
        out.append(Sample(name, labels, v))
    return out, bad


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """What one scrape says. ``t_s``: driver clock (s from run start); quantities None when not exposed."""

    t_s: float
    counters: dict[str, float] = field(default_factory=dict)  #: COUNTERS keys -> summed value
    gauges: dict[str, float] = field(default_factory=dict)  #: GAUGES keys -> value (kv usage: max over engines)
    info: dict[str, dict[str, str]] = field(default_factory=dict)  #: ``*_info`` metric -> labels (first set)
    engine: str | None = None  #: "vllm" when any ``vllm:`` metric is present
    bad_lines: int = 0

    def cache_config(self) -> dict[str, int | None]:
        """``num_gpu_blocks`` and ``block_size`` from ``vllm:cache_config_info`` (None when absent)."""
        labels = self.info.get("vllm:cache_config_info", {})
        out: dict[str, int | None] = {}
        for key in ("num_gpu_blocks", "block_size"):
            try:
                out[key] = int(float(labels[key]))
            except (KeyError, ValueError):
                out[key] = None
        return out


def snapshot(text: str, t_s: float) -> EngineSnapshot:
    """Parse a ``/metrics`` body into an :class:`EngineSnapshot`."""
    samples, bad = parse_prometheus(text)
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
    counters = {}
    for key, names in COUNTERS.items():
        for n in names:
            if n in by_name:
                counters[key] = float(sum(s.value for s in by_name[n] if math.isfinite(s.value)))
                break
    gauges = {}
    for key, names in GAUGES.items():
        for n in names:
            if n in by_name:
                vals = [s.value for s in by_name[n] if math.isfinite(s.value)]
                if vals:
                    gauges[key] = float(max(vals) if key == "kv_cache_usage" else sum(vals))
                break
    info = {n: dict(ss[0].labels) for n, ss in by_name.items() if n.endswith("_info") and ss}
    engine = "vllm" if any(n.startswith("vllm:") for n in by_name) else None
    return EngineSnapshot(t_s, counters, gauges, info, engine, bad)


def deltas(before: EngineSnapshot | None, after: EngineSnapshot | None) -> dict[str, float]:
    """Counter increase over the run per COUNTERS key present in both scrapes (a counter reset gives the
    after value, as Prometheus' ``increase`` would)."""
    if before is None or after is None:
        return {}
    out = {}
    for key, v1 in after.counters.items():
        if key in before.counters:
            v0 = before.counters[key]
            out[key] = v1 - v0 if v1 >= v0 else v1
    return out

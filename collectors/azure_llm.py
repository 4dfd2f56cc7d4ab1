"""Collector for the Azure LLM inference trace 2023 (``AzureLLMInferenceTrace_conv.csv`` / ``_code.csv``).

Native format (Azure/AzurePublicDataset ``data/``): CSV with columns ``TIMESTAMP`` (wall clock, e.g.
``2023-11-16 18:15:46.6805900``, up to 7 fractional digits), ``ContextTokens``, ``GeneratedTokens``; one row per
request. Each row becomes a one-turn program (:mod:`collectors.requests`); ``input_tokens = ContextTokens``,
``output_tokens = GeneratedTokens``. The stamps are one clock, so conv and code collected together keep their
true interleaving (origin: the earliest request of all files).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from collectors.base import BadInput, CollectResult
from collectors.requests import Req, as_int, collect_requests, csv_rows, detects, recogniser

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_EPOCH = datetime(2000, 1, 1)


def parse_stamp(value: str, line: int) -> float:
    """Seconds since 2000-01-01 of a ``YYYY-MM-DD HH:MM:SS[.fraction]`` stamp (any number of digits)."""
    main, _, frac = value.strip().partition(".")
    try:
        t = datetime.strptime(main, "%Y-%m-%d %H:%M:%S")
        if frac and not frac.isdigit():
            raise ValueError
    except ValueError:
        raise BadInput(f"line {line}: field 'TIMESTAMP' = {value!r} is not 'YYYY-MM-DD HH:MM:SS[.fraction]'") from None
    return (t - _EPOCH).total_seconds() + (int(frac) / 10 ** len(frac) if frac else 0.0)


def parse_file(path: Path) -> list[Req]:
    return [
        Req(
            line,
            parse_stamp(row["TIMESTAMP"], line),
            as_int(row["ContextTokens"], line, "ContextTokens", minimum=1),
            as_int(row["GeneratedTokens"], line, "GeneratedTokens"),
        )
        for line, row in csv_rows(path, COLUMNS)
    ]


_recognise = recogniser(".csv", COLUMNS)


class AzureLLMCollector:
    name = "azure-llm"
    description = "Azure LLM inference trace 2023 (CSV: TIMESTAMP, ContextTokens, GeneratedTokens)"

    def detect(self, path: Path) -> bool:
        return detects(path, ".csv", _recognise)

    def collect(self, path: Path) -> CollectResult:
        return collect_requests(
            self.name,
            path,
            ".csv",
            _recognise,
            parse_file,
            shared_clock=True,
            clock_note="one wall clock; merged in time order from the earliest request",
        )

"""Collector for the Splitwise request traces as Vidur ships them (``splitwise_conv.csv``, ``splitwise_code.csv``).

Native format (microsoft/vidur ``data/processed_traces/``): CSV with columns ``arrived_at`` (seconds from the
first request), ``num_prefill_tokens``, ``num_decode_tokens``; one row per request. Vidur's processing of the
Azure 2023 LLM inference trace of the Splitwise paper. Each row becomes a one-turn program
(:mod:`collectors.requests`); ``input_tokens = num_prefill_tokens``, ``output_tokens = num_decode_tokens``,
arrival = ``arrived_at``. Several files (conv and code) are overlaid, each from its own first request: their
``arrived_at`` clocks have no common origin.
"""

from __future__ import annotations

from pathlib import Path

from collectors.base import CollectResult
from collectors.requests import Req, as_int, as_time, collect_requests, csv_rows, detects, recogniser

COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")


def parse_file(path: Path) -> list[Req]:
    return [
        Req(
            line,
            as_time(row["arrived_at"], line, "arrived_at"),
            as_int(row["num_prefill_tokens"], line, "num_prefill_tokens", minimum=1),
            as_int(row["num_decode_tokens"], line, "num_decode_tokens"),
        )
        for line, row in csv_rows(path, COLUMNS)
    ]


_recognise = recogniser(".csv", COLUMNS)


class SplitwiseCollector:
    name = "splitwise"
    description = "Splitwise request traces (Vidur CSV: arrived_at, num_prefill_tokens, num_decode_tokens)"

    def detect(self, path: Path) -> bool:
        return detects(path, ".csv", _recognise)

    def collect(self, path: Path) -> CollectResult:
        return collect_requests(
            self.name,
            path,
            ".csv",
            _recognise,
            parse_file,
            shared_clock=False,
            clock_note="each file's arrived_at starts at its own first request; the files are overlaid from t = 0",
        )

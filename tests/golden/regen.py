"""Regenerate the golden files: ``python -m tests.golden.regen [--validation]``.

Regenerate ONLY for an intended behaviour change (a fix or a model change that is meant to move simulated
numbers), never to make a refactoring pass, and say so in the commit message ("golden regenerated: <why>").
``--validation`` also rewrites ``expected_validation.json`` (needs ``../shared``).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from tests.golden.cases import EXPECTED, EXPECTED_VALIDATION, cases, run_case, validation_digest


def main(argv: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = {name: run_case(name, Path(tmp)) for name in cases()}
    EXPECTED.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {EXPECTED} ({len(out)} cases)")
    if "--validation" in argv:
        EXPECTED_VALIDATION.write_text(json.dumps(validation_digest(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {EXPECTED_VALIDATION}")


if __name__ == "__main__":
    main(sys.argv[1:])

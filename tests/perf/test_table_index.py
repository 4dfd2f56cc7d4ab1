"""The index of ``tables.toml`` (agentreplay.perf.table_index): ``auto`` decides from it without parsing the
tables, and makes the same choice as from the parsed file for every deployment; a missing or stale index is not
used (the file is parsed), a malformed one is refused naming the file and field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from agentreplay.perf import list_gpus, list_models
from agentreplay.perf import table_index as ti
from agentreplay.perf.loaders import tables_path
from agentreplay.perf.registry import choose_from, choose_pricer
from agentreplay.perf.table import MeasuredTable, TableOrigin, load_tables

KEY = "rtx4090/llama-3.1-8b/tp1"
PROFILE = TableOrigin(KEY, "mine/tp1", "vllm", "0.20.0", "bf16")


def _write(folder: Path, origin: TableOrigin | None) -> Path:
    """A ``tables.toml`` (and its index) with the packaged rtx4090 table, a deployment profile when ``origin``."""
    from validation.calibration.write import write_tables
    from validation.catalog import Catalog

    t = load_tables()[KEY]
    return write_tables(
        {KEY: MeasuredTable(t.name, t.gpu, t.model, t.tp, t.dtype, t.ops)},
        Catalog.create(folder),
        None,
        {KEY: origin} if origin else None,
    )


def test_the_packaged_index_is_the_packaged_tables() -> None:
    """Fails when ``tables.toml`` changed without its index (regenerate it:
    ``validation.calibration.write.write_table_index``)."""
    path = tables_path()
    assert ti.read_index(path) == ti.parse_entries(path) != {}


def test_the_index_gives_the_parsed_files_choice_for_every_deployment() -> None:
    path = tables_path()
    indexed, parsed = ti.read_index(path), ti.parse_entries(path)
    assert indexed is not None
    tps = sorted({1, 2, 4, 8} | {e.tp for e in parsed.values()})
    kinds = set()
    for gpu in list_gpus():
        for model in list_models():
            for tp in tps:
                for dtype in ("bf16", "fp8"):
                    for kv in ("bf16", "fp8"):
                        got = choose_from(indexed, gpu, model, dtype, tp, kv)
                        assert got == choose_from(parsed, gpu, model, dtype, tp, kv), (gpu, model, tp, dtype, kv)
                        assert got == choose_pricer(gpu, model, dtype, tp, kv_dtype=kv)
                        kinds.add(got.kind)
    assert kinds == {"table", "roofline"}


def test_auto_reads_the_index_not_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_parse(*_: object) -> None:
        raise AssertionError("tables.toml parsed although its index stands for it")

    monkeypatch.setattr(ti, "load_tables", no_parse)
    assert choose_pricer("rtx4090", "llama-3.1-8b").kind == "table"
    assert "kernel profile" in choose_pricer("h100-sxm", "llama-3.1-8b").reason


def test_the_writer_writes_the_index_beside_the_tables(tmp_path: Path) -> None:
    path = _write(tmp_path, PROFILE)
    assert ti.index_path(path) == tmp_path / ti.INDEX and ti.index_path(path).is_file()
    assert ti.read_index(path) == ti.parse_entries(path)
    written = ti.read_index(path)[KEY].origin  # type: ignore[index]
    assert written == dataclasses.replace(PROFILE, source=load_tables()[KEY].name)  # the table's source is written
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left


def test_a_missing_index_falls_back_to_the_tables(tmp_path: Path) -> None:
    path = _write(tmp_path, PROFILE)
    with_index = choose_pricer("rtx4090", "llama-3.1-8b", catalog=tmp_path / "gpus.toml")
    ti.index_path(path).unlink()
    assert ti.read_index(path) is None and ti.table_entries(path) == ti.parse_entries(path)
    assert choose_pricer("rtx4090", "llama-3.1-8b", catalog=tmp_path / "gpus.toml") == with_index
    assert with_index.kind == "table" and "vllm 0.20.0" in with_index.reason


def test_a_stale_index_is_not_used(tmp_path: Path) -> None:
    """An index left from other tables (``tables.toml`` rewritten without it) would pick the table; the file as
    it is now holds a kernel profile only, and that is what ``auto`` reads."""
    path = _write(tmp_path, PROFILE)
    stale_text = ti.index_path(path).read_text()
    stale = ti.read_index(path)
    assert stale is not None
    _write(tmp_path, None)
    ti.index_path(path).write_text(stale_text)
    assert ti.read_index(path) is None and ti.table_entries(path) == ti.parse_entries(path)
    assert choose_from(stale, "rtx4090", "llama-3.1-8b", "bf16", 1, "bf16").kind == "table"
    got = choose_pricer("rtx4090", "llama-3.1-8b", catalog=tmp_path / "gpus.toml")
    assert got.kind == "roofline" and "kernel profile" in got.reason


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["tables"][KEY].update(tp="1"), f"tables.{KEY}.tp = '1': expected int"),
        (lambda d: d["tables"][KEY].update(tp=True), f"tables.{KEY}.tp = True: expected int"),
        (lambda d: d["tables"][KEY].pop("dtype"), f"tables.{KEY}: field 'dtype' is missing"),
        (lambda d: d["tables"][KEY].update(extra=1), r"unknown field\(s\) \['extra'\]"),
        (lambda d: d["tables"][KEY].update(kv_dtype=None), "engine, engine_version and kv_dtype go together"),
        (lambda d: d["tables"][KEY].update(engine=3), f"tables.{KEY}.engine = 3: expected str or null"),
        (lambda d: d.update(schema_version=2), "schema_version = 2: expected 1"),
        (lambda d: d.pop("tables"), "needs tables_sha256"),
    ],
)
def test_a_malformed_index_names_the_file_and_field(tmp_path: Path, edit, message: str) -> None:
    path = _write(tmp_path, PROFILE)
    index = ti.index_path(path)
    doc = json.loads(index.read_text())
    edit(doc)
    index.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message) as exc:
        choose_pricer("rtx4090", "llama-3.1-8b", catalog=tmp_path / "gpus.toml")
    assert str(index) in str(exc.value)


def test_an_index_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, PROFILE)
    ti.index_path(path).write_text("{not json")
    with pytest.raises(ValueError, match=f"{ti.index_path(path)}: not a tables index"):
        ti.read_index(path)

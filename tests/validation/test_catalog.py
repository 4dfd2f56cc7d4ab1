"""The catalog folder as one object: which file is read (the folder's, else the packaged one), the pricers built on
it are the packaged ones' for the packaged folder, bad folders are refused by name, writes land in the folder."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from agentreplay.perf import list_gpus, load_gpu
from agentreplay.perf.loaders import load_refinement
from agentreplay.perf.registry import choose_pricer, pricer_from_names
from validation.calibration import calibrate as K
from validation.catalog import FILES, GPUS, PACKAGED, Catalog, packaged_folder


def _own(tmp_path: Path, *names: str) -> Catalog:
    """A catalog folder holding copies of the packaged ``names`` only."""
    for name in names:
        shutil.copyfile(packaged_folder() / name, tmp_path / name)
    return Catalog.open(tmp_path)


def test_the_packaged_catalog_reads_what_the_perf_loaders_read() -> None:
    assert Catalog.open() == PACKAGED == Catalog.open(packaged_folder())
    assert PACKAGED.gpus() == list_gpus()
    for g in ("h100-sxm", "rtx4090", "b200"):
        spec = PACKAGED.gpu(g)
        assert spec == load_gpu(g)
        assert PACKAGED.refinement(spec) == load_refinement(spec)
    assert PACKAGED.calibration() == json.loads((packaged_folder() / "calibration.json").read_text())
    a = PACKAGED.pricer("refined", "rtx4090", "llama-3.1-8b", "bf16", 1, mixed_attention="apart")
    b = pricer_from_names("refined", "rtx4090", "llama-3.1-8b", "bf16", 1, None, "apart")
    assert type(a) is type(b)
    assert a.decode_step_time_s(batch=8, ctx=2048) == b.decode_step_time_s(batch=8, ctx=2048)
    assert PACKAGED.choose_pricer("rtx4090", "llama-3.1-8b", "bf16", 1, kv_dtype="bf16") == choose_pricer(
        "rtx4090", "llama-3.1-8b"
    )


def test_a_folder_reads_its_own_files_else_the_packaged_ones(tmp_path: Path) -> None:
    cat = _own(tmp_path, GPUS, "roofline.toml")
    assert cat.file(GPUS) == cat.gpus_file == tmp_path / GPUS
    assert cat.file("roofline.toml") == tmp_path / "roofline.toml"
    assert cat.file("tables.toml") == packaged_folder() / "tables.toml"
    (tmp_path / "roofline.toml").write_text('[gpu."rtx4090"]\nattn_kernel_us = 9.5\n')
    eff, ref = cat.refinement(cat.gpu("rtx4090"))
    assert ref.attn_kernel_us == 9.5 and eff == cat.gpu("rtx4090").efficiency  # the folder's, not the packaged
    assert cat.calibration() == PACKAGED.calibration()  # none in the folder: the packaged one
    with pytest.raises(ValueError, match=r"catalog file 'models\.toml'; known: gpus\.toml"):
        cat.file("models.toml")


def test_the_folders_defaults_override_the_packaged_ones_key_by_key(tmp_path: Path) -> None:
    cat = _own(tmp_path, GPUS)
    text = (tmp_path / GPUS).read_text()
    start = text.index("[defaults.efficiency]\n")
    block = text[start : text.index("\n\n", start)]
    changed = block.replace("framework_overhead_ms = 0.5\n", "framework_overhead_ms = 0.75\n")
    assert changed != block
    (tmp_path / GPUS).write_text(text.replace(block, changed))
    got, packaged = cat.default_efficiency(), PACKAGED.default_efficiency()
    assert got["framework_overhead_ms"] == 0.75 != packaged["framework_overhead_ms"]
    assert {k: v for k, v in got.items() if k != "framework_overhead_ms"} == {
        k: v for k, v in packaged.items() if k != "framework_overhead_ms"
    }


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", r"catalog folder .*missing does not exist"),
        (lambda p: (p / GPUS).write_text("") or p / GPUS, r"a catalog is a folder .* pass its folder"),
        (lambda p: p, r"holds no gpus\.toml"),
    ],
)
def test_a_bad_catalog_folder_is_refused_by_name(tmp_path: Path, make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Catalog.open(make(tmp_path))


def test_writes_land_in_the_folder_whole(tmp_path: Path) -> None:
    cat = Catalog.create(tmp_path / "new" / "catalog")
    assert cat.folder.is_dir()
    path = cat.write("calibration.json", '{"gpus": {}}\n')
    assert path == cat.folder / "calibration.json" and cat.calibration() == {"gpus": {}}
    assert sorted(p.name for p in cat.folder.iterdir()) == ["calibration.json"]  # no temporary file left
    with pytest.raises(ValueError, match=r"catalog file 'x\.toml'"):
        cat.write("x.toml", "")
    with pytest.raises(ValueError, match="a catalog is a folder"):
        Catalog.create(path)


def test_a_copy_keeps_every_file_but_the_gpus(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    src = _own(tmp_path / "src", GPUS, "roofline.toml")
    (src.folder / "roofline.toml").write_text('[gpu."a40"]\nattn_kernel_us = 7.0\n')
    g = src.gpu("a40")
    eff = dataclasses.replace(g.efficiency, kernel_overhead_us=g.efficiency.kernel_overhead_us + 2.0)
    copy = K.with_efficiency(src, "a40", eff, tmp_path / "copy")
    assert copy.folder == tmp_path / "copy" and set(FILES) <= {p.name for p in copy.folder.iterdir()}
    assert copy.gpu("a40").efficiency.kernel_overhead_us == pytest.approx(eff.kernel_overhead_us, rel=1e-3)
    assert copy.file("roofline.toml").read_text() == (src.folder / "roofline.toml").read_text()  # the source's own
    assert copy.refinement(copy.gpu("a40"))[1].attn_kernel_us == 7.0
    assert src.gpu("a40") == g  # the source is untouched

"""The catalog folder as one object (:class:`Catalog`): what validation reads from it and what calibration
writes back into it.

A catalog folder holds ``gpus.toml`` (datasheet peaks and the plain roofline's efficiencies per GPU),
``roofline.toml`` (the refined roofline's fitted parameters), ``tables.toml`` (measured tables, all-reduce curves,
deployment profiles), ``calibration.json`` (what ``agentreplay calibrate`` fitted, on which cells, or borrowed
from which GPU) and ``engine_cost.json`` (the engine cost and client path ``agentreplay calibrate --engine-cost``
fits end to end). It is built once (:meth:`Catalog.open`: the packaged ``agentreplay/perf/catalog`` by default,
``--catalog DIR`` on the command line) and handed to every step that prices or reads; the calibration commands
write through it (:meth:`Catalog.write`).

Which file is read: ``gpus.toml`` always the folder's own (a folder without one is refused); every other file the
folder's when it holds one, else the packaged one. That is the rule by which :mod:`agentreplay.perf` finds a
pricer's files beside a GPU catalog (:func:`agentreplay.perf.loaders.refinement_path`), so what validation reads
and what the pricers it builds (:meth:`Catalog.pricer`) price from are the same files. Model shapes come from the
packaged ``models.toml``, as the pricers load them (:func:`agentreplay.perf.registry.pricer_from_names` takes no
model catalog).

The object lives in :mod:`validation`, not :mod:`agentreplay.perf`: only validation and its commands treat the
catalog as a folder to read whole and write back; the simulator's loaders take file paths and are used as they
are, so :mod:`agentreplay.perf` imports nothing from here.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from agentreplay.perf import Efficiency, GpuSpec, ModelSpec, PerfModel, list_gpus, load_gpu, load_model
from agentreplay.perf.catalog import packaged_file
from agentreplay.perf.loaders import catalog_file
from agentreplay.perf.table import (
    PricerChoice,
    Refinement,
    TablePerfModel,
    choose_pricer,
    load_refinement,
    pricer_from_names,
)

#: The GPU catalog: every other file goes with it.
GPUS: Final = "gpus.toml"
#: The files of a catalog folder that validation reads or calibration writes.
FILES: Final = (GPUS, "roofline.toml", "tables.toml", "tables_index.json", "calibration.json", "engine_cost.json")


def packaged_folder() -> Path:
    """The catalog folder shipped with :mod:`agentreplay.perf` (``agentreplay/perf/catalog``)."""
    return packaged_file(GPUS).parent


@dataclass(frozen=True, slots=True)
class Catalog:
    """One catalog folder (module docstring). Immutable: a changed catalog is a copy in another folder
    (:meth:`copy`)."""

    folder: Path

    @classmethod
    def packaged(cls) -> Catalog:
        """The catalog shipped with :mod:`agentreplay.perf`."""
        return cls(packaged_folder())

    @classmethod
    def open(cls, folder: str | Path | None = None) -> Catalog:
        """The catalog in ``folder`` (None: the packaged one), to read from. Raises ValueError, naming the path,
        when ``folder`` is not a folder holding a ``gpus.toml``."""
        if folder is None:
            return cls.packaged()
        path = Path(folder)
        if path.is_file():
            raise ValueError(
                f"catalog {path}: a catalog is a folder (gpus.toml, roofline.toml, tables.toml, ...), not a file; "
                f"pass its folder ({path.parent})"
            )
        if not path.is_dir():
            raise ValueError(f"catalog folder {path} does not exist")
        if not (path / GPUS).is_file():
            raise ValueError(f"catalog folder {path} holds no {GPUS} (the GPU catalog the other files go with)")
        return cls(path)

    @classmethod
    def create(cls, folder: str | Path) -> Catalog:
        """The catalog folder ``folder`` to write into (created with its parents when missing)."""
        path = Path(folder)
        if path.is_file():
            raise ValueError(f"catalog {path}: a catalog is a folder, not a file; pass a folder to write into")
        path.mkdir(parents=True, exist_ok=True)
        return cls(path)

    # ---- files ------------------------------------------------------------------------------------------------
    @property
    def gpus_file(self) -> Path:
        """The folder's ``gpus.toml`` (also the path :mod:`agentreplay.perf`'s loaders take as ``catalog``)."""
        return self.folder / GPUS

    def file(self, name: str) -> Path:
        """Where ``name`` (one of :data:`FILES`) is read: the folder's own, else the packaged one (``gpus.toml``:
        always the folder's)."""
        if name not in FILES:
            raise ValueError(f"catalog file {name!r}; known: {', '.join(FILES)}")
        return self.gpus_file if name == GPUS else catalog_file(self.gpus_file, name)

    def write(self, name: str, text: str) -> Path:
        """Write ``text`` as the folder's ``name`` (one of :data:`FILES`): to a temporary name, then moved into
        place, so a reader never sees half a file. Returns the path written."""
        if name not in FILES:
            raise ValueError(f"catalog file {name!r}; known: {', '.join(FILES)}")
        dst = self.folder / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.tmp")
        tmp.write_text(text)
        tmp.replace(dst)
        return dst

    # ---- reads ------------------------------------------------------------------------------------------------
    def gpus(self) -> list[str]:
        """The GPU names of ``gpus.toml``, sorted."""
        return list_gpus(self.gpus_file)

    def gpu(self, name: str) -> GpuSpec:
        """The GPU ``name`` of ``gpus.toml`` (ValueError naming the known ones when it has none)."""
        return load_gpu(name, self.gpus_file)

    def model(self, name: str) -> ModelSpec:
        """The model ``name`` of the packaged ``models.toml`` (module docstring: the pricers read that one)."""
        return load_model(name)

    def refinement(self, gpu: GpuSpec) -> tuple[Efficiency, Refinement]:
        """``(efficiency, refinement)`` of ``gpu`` for the refined roofline (``roofline.toml``: its keys override
        ``gpus.toml``'s; no entry: the GPU's efficiency and no refinement)."""
        return load_refinement(gpu, self.file("roofline.toml"))

    def calibration(self) -> dict[str, Any]:
        """The ``calibration.json`` (what ``agentreplay calibrate`` fitted), or {} when there is none."""
        path = self.file("calibration.json")
        return json.loads(path.read_text()) if path.exists() else {}

    def default_efficiency(self) -> dict[str, float]:
        """The ``[defaults.efficiency]`` values: the packaged ``gpus.toml``'s, overridden key by key by the
        folder's (the rule :func:`agentreplay.perf.load_gpu` fills a GPU's missing keys by)."""
        out: dict[str, float] = {}
        for path in dict.fromkeys((packaged_folder() / GPUS, self.gpus_file)):
            with open(path, "rb") as f:
                out.update(tomllib.load(f).get("defaults", {}).get("efficiency", {}))
        return out

    # ---- pricers ----------------------------------------------------------------------------------------------
    def pricer(
        self,
        kind: str,
        gpu: str,
        model: str,
        dtype: str = "bf16",
        tp: int = 1,
        *,
        mixed_attention: str = "one_kernel",
        kv_dtype: str = "bf16",
        async_scheduling: bool = False,
    ) -> PerfModel | TablePerfModel:
        """:func:`agentreplay.perf.registry.pricer_from_names` on this catalog's files (``kind``: one of
        ``auto``, ``roofline``, ``refined``, ``table``)."""
        return pricer_from_names(
            kind,
            gpu,
            model,
            dtype,  # type: ignore[arg-type]
            tp,
            self.gpus_file,
            mixed_attention,
            kv_dtype=kv_dtype,  # type: ignore[arg-type]
            async_scheduling=async_scheduling,
        )

    def choose_pricer(self, gpu: str, model: str, dtype: str, tp: int, *, kv_dtype: str) -> PricerChoice:
        """What ``auto`` runs for the deployment on this catalog's ``tables.toml``
        (:func:`agentreplay.perf.registry.choose_pricer`)."""
        return choose_pricer(gpu, model, dtype, tp, kv_dtype=kv_dtype, catalog=self.gpus_file)

    # ---- copies -----------------------------------------------------------------------------------------------
    def copy(self, folder: str | Path, gpus_text: str) -> Catalog:
        """A copy of this catalog in ``folder``, with ``gpus_text`` as its ``gpus.toml`` and every other file this
        catalog reads (:meth:`file`) copied, so the copy prices as this one but for what ``gpus_text`` changes
        (:func:`validation.calibration.write.with_efficiency`)."""
        out = Catalog.create(folder)
        for name in FILES:
            src = self.file(name)
            if name != GPUS and src.exists():
                shutil.copyfile(src, out.folder / name)
        out.write(GPUS, gpus_text)
        return out


#: The packaged catalog: the default wherever a catalog is optional.
PACKAGED: Final = Catalog.packaged()

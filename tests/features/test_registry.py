"""The feature registry (agentreplay.features.registry) and the configuration it extends: every feature's config
sections, mechanism factory and page are where its declaration says, and :class:`SimConfig` gets one typed field
per feature section, in the order config.toml has always listed them."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from agentreplay.features import registry
from agentreplay.features.base import load
from agentreplay.features.registry import SECTIONS, SUMMARY_EARLY, SUMMARY_LATE, FeatureSections, features
from agentreplay.sim.config import CoreConfig, SimConfig, from_dict, to_toml, unknown_names

#: the sections config.toml listed after the core ones before the features had folders (the order is kept)
FEATURE_SECTIONS = ("disagg", "footprint", "admission", "classes", "speculative", "thinking", "failures")


def test_simconfig_has_the_core_sections_then_the_features_then_the_seed() -> None:
    core = [f.name for f in dataclasses.fields(CoreConfig)]
    assert core == ["hardware", "cache", "scheduler", "workload", "tools", "router", "policy", "tiers", "metrics"]
    # the sections of the features as they were first released keep their place (config.toml's order); a new
    # feature's sections come after them
    assert SECTIONS[: len(FEATURE_SECTIONS)] == FEATURE_SECTIONS
    assert [f.name for f in dataclasses.fields(SimConfig)] == [*core, *SECTIONS, "seed"]
    assert list(SimConfig().to_dict()) == [*core, *SECTIONS, "seed"]


def test_each_section_is_typed_as_the_dataclass_its_feature_owns() -> None:
    """FeatureSections (what mypy reads) names, for each section, the class of the owning feature's CONFIG."""
    hints = typing.get_type_hints(FeatureSections, vars(registry) | _config_classes())
    types = registry.section_types()
    assert hints == types
    defaults = SimConfig()
    for name, cls in types.items():
        assert type(getattr(defaults, name)) is cls


def test_the_config_s_type_hints_resolve_at_run_time() -> None:
    """Sweeps read a field's type from the config classes (agentreplay.sweep.spec): every hint resolves."""
    hints = typing.get_type_hints(SimConfig)
    assert [hints[name] for name in SECTIONS] == list(registry.section_types().values())
    assert hints["seed"] is int


def _config_classes() -> dict[str, type]:
    return {cls.__name__: cls for cls in registry.section_types().values()}


def test_every_feature_declares_what_its_folder_holds() -> None:
    for f in features():
        assert f.folder.is_dir() and f.name in registry.NAMES
        config = load(f.config) if f.config else {}
        assert tuple(config) == f.sections, f.name
        assert all(dataclasses.is_dataclass(c) for c in config.values()), f.name
        if f.mechanism is not None:
            assert callable(load(f.mechanism)), f.name
            assert f.doc.is_file(), f"{f.name}: a feature with a mechanism documents it in {f.doc}"


def test_a_feature_config_that_disagrees_with_its_declaration_fails_naming_it(monkeypatch) -> None:
    bad = dataclasses.replace(features()[0], sections=("nosuch",))
    monkeypatch.setattr(registry, "features", lambda: (bad, *features()[1:]))
    registry.section_types.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"feature 'thinking': CONFIG holds sections \['thinking'\]"):
            registry.section_types()
    finally:
        registry.section_types.cache_clear()


def test_feature_sections_parse_round_trip_and_report_unknown_keys() -> None:
    data = {
        "seed": 3,
        "disagg": {"enabled": True, "prefill_instances": 2},
        "failures": {"events": [{"instance": 1, "at_s": 5.0}], "placement": "age-aware"},
        "speculative": {"method": "ngram", "num_speculative_tokens": 2},
        "thinking": {"budget_tokens": 100},
        "classes": {"enabled": True},
        "admission": {"policy": "deadline"},
        "footprint": {"interval_s": 1.0},
    }
    cfg = from_dict(data)
    assert cfg.disagg.prefill_instances == 2 and cfg.failures.events[0].instance == 1
    import tomllib

    assert from_dict(tomllib.loads(to_toml(cfg))) == cfg
    assert from_dict(cfg.to_dict()) == cfg
    assert unknown_names({"failures": {"mtbf": 1.0}, "disagg": {"enable": True}}) == [
        "[failures] unknown field(s) ['mtbf'] (did you mean 'mtbf_s'?)",
        "[disagg] unknown field(s) ['enable'] (did you mean 'enabled'?)",
    ]
    assert unknown_names({"sections": {}})[0].startswith("unknown section(s) ['sections']")


def test_a_section_that_is_off_stays_out_of_config_toml() -> None:
    text = to_toml(SimConfig())
    heads = [line for line in text.splitlines() if line.startswith("[")]
    core = [f"[{f.name}]" for f in dataclasses.fields(CoreConfig)]
    assert heads == [*core, "[footprint]", "[admission]"]  # (the sections without an on/off switch)


def test_replace_builds_a_feature_section_from_changes() -> None:
    cfg = SimConfig().replace(failures={"mtbf_s": 100.0}, seed=4)
    assert cfg.failures.enabled and cfg.seed == 4 and cfg.disagg == SimConfig().disagg


def test_the_summary_layout_names_each_mechanism_section_once() -> None:
    assert len(set(SUMMARY_EARLY + SUMMARY_LATE)) == len(SUMMARY_EARLY + SUMMARY_LATE)

import json
import math

import pytest
from rehearsal_gym.envs import REAL_ENV_IDS

from rehearsal_gym.defaults import (
    SHIPPED_DEFAULT,
    default_lm,
    default_manifest,
    default_model_dir,
    installed_default_dir,
)


def test_the_shipped_default_is_used_with_an_empty_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("REHEARSAL_GYM_HOME", str(tmp_path))
    assert default_model_dir() == SHIPPED_DEFAULT
    manifest = default_manifest()
    assert manifest["command"].startswith("rehearsal-gym warmstart")
    assert set(manifest["held_out"]) == set(REAL_ENV_IDS)
    assert default_lm().num_parameters() == manifest["parameters"]
    assert list(tmp_path.iterdir()) == []  # nothing trained, nothing cached


def test_an_installed_default_takes_precedence_and_removing_it_restores_the_shipped_one(
    tiny_lm, monkeypatch, tmp_path
):
    monkeypatch.setenv("REHEARSAL_GYM_HOME", str(tmp_path))
    tiny_lm.save(installed_default_dir())
    assert default_model_dir() == tmp_path / "default"
    assert default_lm().num_parameters() == tiny_lm.num_parameters()
    assert default_manifest() == {}  # a model saved without a manifest
    import shutil

    shutil.rmtree(installed_default_dir())
    assert default_model_dir() == SHIPPED_DEFAULT


def test_a_missing_shipped_default_says_how_to_get_one(monkeypatch, tmp_path):
    from rehearsal_gym import defaults

    monkeypatch.setenv("REHEARSAL_GYM_HOME", str(tmp_path))
    monkeypatch.setattr(defaults, "SHIPPED_DEFAULT", tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="rehearsal-gym warmstart --install"):
        default_model_dir()


def test_write_manifest_records_config_figures_and_command(tiny_lm, tmp_path):
    from rehearsal_gym.training.warmstart import WarmStartConfig, write_manifest

    tiny_lm.save(tmp_path)
    config = WarmStartConfig(steps=5)
    write_manifest(
        tmp_path, tiny_lm, config, {"ToolCall-v0": {"tasks": 3, "success": 0.5}}, "rehearsal-gym warmstart"
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["warmstart_key"] == config.key() and manifest["warmstart_config"]["steps"] == 5
    assert manifest["parameters"] == tiny_lm.num_parameters()
    assert manifest["held_out"]["ToolCall-v0"] == {"tasks": 3, "success": 0.5}


def test_the_shipped_default_reaches_its_manifest_figures():
    """Held-out success of the shipped weights on the manifest's tasks, within sampling noise.

    Evaluation is greedy, so on the same machine it repeats exactly; the tolerance (3 standard
    errors of a rate on 100 tasks, at least 2 tasks) leaves room for other CPUs' float rounding."""
    from rehearsal_gym.core.rollout import evaluate

    lm = default_lm()
    for env_id, figure in default_manifest()["held_out"].items():
        n, expected = figure["tasks"], figure["success"]
        got = evaluate(lm, env_id, n)["success"]
        tolerance = max(2 / n, 3 * math.sqrt(max(expected * (1 - expected), 1 / n) / n))
        assert abs(got - expected) <= tolerance, (env_id, got, expected)

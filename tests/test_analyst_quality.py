import importlib.util
from pathlib import Path

import pytest

from rehearsal_gym.analyst import AnalystConfig
from rehearsal_gym.skills import Skill


def _script():
    path = Path(__file__).parents[1] / "benchmarks" / "analyst_quality.py"
    spec = importlib.util.spec_from_file_location("analyst_quality", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_variants_parse_into_checked_analyst_configs():
    script = _script()
    assert script.parse_variant("default") == AnalystConfig()
    config = script.parse_variant("lr=3e-4,oracle_fraction=1.0,steps=800")
    assert (config.lr, config.oracle_fraction, config.steps) == (3e-4, 1.0, 800)
    assert isinstance(config.steps, int)
    config = script.parse_variant("oracle_tasks_per_env=1000,oracle_fraction=3")
    assert (config.oracle_tasks_per_env, config.oracle_fraction) == (1000, 3.0)
    assert isinstance(config.oracle_tasks_per_env, int)
    for bad in ("lr", "envs=ToolCall-v0", "learning_rate=1e-3"):
        with pytest.raises(ValueError, match="--variant"):
            script.parse_variant(bad)
    with pytest.raises(ValueError, match="AnalystConfig.lr"):
        script.parse_variant("lr=-1")
    with pytest.raises(ValueError, match="AnalystConfig.oracle_tasks_per_env"):
        script.parse_variant("oracle_tasks_per_env=0")


def test_skill_scores_count_parses_labels_and_workflows():
    script = _script()
    label = Skill("workflow", "Workflow for percent: percent_of -> ANSWER. Rule: copy the result")
    same_workflow = Skill("workflow", "Workflow for percent: percent_of -> ANSWER. Rule: something else")
    other = Skill("avoid", "Workflow for days: add_days -> ANSWER. Rule: copy the result")
    scores = script.skill_scores([label, same_workflow, other, None], [label] * 4)
    assert scores == {"valid": 0.75, "label_match": 0.25, "workflow_match": 0.5}

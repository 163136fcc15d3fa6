import importlib.util
from pathlib import Path

import gymnasium as gym
import pytest

from rehearsal_gym.selfsim import SelfSimEnv


def _script():
    path = Path(__file__).parents[1] / "benchmarks" / "world_coverage.py"
    spec = importlib.util.spec_from_file_location("world_coverage", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_coverage_counts_the_real_and_imagined_values_of_one_field():
    script = _script()
    real = [{"weekday": "Tuesday"}, {"weekday": "Monday"}, {"weekday": "Tuesday"}]
    imagined = {"world": [{"weekday": "Monday"}, None, {"other": 1}]}
    rows, field = script.coverage(real, imagined, None)
    assert field == "weekday"
    assert rows == [
        {"weekday": "Tuesday", "real tool": 2, "world": 0},
        {"weekday": "Monday", "real tool": 1, "world": 1},
        {"weekday": script.UNUSABLE, "real tool": 0, "world": 2},
    ]


def test_first_results_of_real_and_imagined_tools(tiny_lm):
    script = _script()
    tasks = script.template_tasks("ToolCall-v0", "weekday", 3)
    family = gym.make("ToolCall-v0", split="train").unwrapped.family
    assert len(tasks) == 3 and all(family.task("train", i).template == "weekday" for i in tasks)
    real = script.first_results(gym.make("ToolCall-v0", split="train"), tasks)
    assert all(set(r) == {"weekday"} for r in real)  # the real tool always answers
    world = SelfSimEnv("ToolCall-v0", model=tiny_lm, split="train", bank_tasks=4)
    imagined = script.first_results(world, tasks)
    assert len(imagined) == 3 and all(r is None or isinstance(r, dict) for r in imagined)
    rows, _ = script.coverage(real, {"world": imagined}, "weekday")
    assert sum(r["real tool"] for r in rows) == sum(r["world"] for r in rows) == 3
    with pytest.raises(ValueError, match="no template"):
        script.template_tasks("ToolCall-v0", "nope", 1)

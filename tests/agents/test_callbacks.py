"""User callbacks see one round's hooks in order and can draw tasks, edit options and log."""

import copy

from rehearsal_gym.agents import PPOConfig, PPOTrainer, TrainerCallback
from rehearsal_gym.agents.callbacks import Grounding, TemplateCurriculumCallback, callbacks_for

from rehearsal_gym.core.model import LM

TINY = dict(iterations=1, tasks_per_iter=2, group_size=2, epochs=2, minibatch_size=4, max_turns=2, lr=1e-3)


class Recorder(TrainerCallback):
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.options: list[dict] = []

    def draw_tasks(self, trainer, n):
        self.calls.append("draw_tasks")
        return [11, 12][:n]

    def on_collect_start(self, trainer, options):
        self.calls.append("on_collect_start")
        for opts in options:
            opts["skill"] = "Workflow: ANSWER."
        self.options = options

    def on_rollout_end(self, trainer, episodes, groups, buffer):
        self.calls.append("on_rollout_end")
        assert len(buffer) == len(episodes) == 4
        return {"charts/mine": 1.0}

    def on_epoch_end(self, trainer, stats):
        self.calls.append("on_epoch_end")

    def on_iteration_end(self, trainer, row):
        self.calls.append("on_iteration_end")
        row["charts/seen_by_end"] = row["charts/mine"]


def test_callback_hooks_run_in_order(tiny_lm):
    recorder = Recorder()
    trainer = PPOTrainer(
        PPOConfig.from_flat(**TINY), LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer), callbacks=[recorder]
    )
    row = trainer.train_iteration()
    assert recorder.calls == [
        "draw_tasks",
        "on_collect_start",
        "on_rollout_end",
        "on_epoch_end",
        "on_epoch_end",
        "on_iteration_end",
    ]
    assert [o["task_index"] for o in recorder.options] == [11, 11, 12, 12]
    assert all(o["skill"] == "Workflow: ANSWER." for o in trainer.last_options)
    assert row["charts/mine"] == row["charts/seen_by_end"] == 1.0


def test_config_asks_for_its_callbacks():
    assert callbacks_for(PPOConfig()) == []
    kinds = [type(cb) for cb in callbacks_for(PPOConfig.from_flat(task_sampling="template-variance"))]
    assert kinds == [TemplateCurriculumCallback]
    (grounding, stats) = callbacks_for(PPOConfig.from_flat(rehearse="wrap", grounding_coef=0.5))
    assert isinstance(grounding, Grounding) and grounding.coef == 0.5 and stats.fidelity

"""Template curriculum: spend a round's task groups where the group's outcomes can differ.

With a group baseline, a task whose samples all succeed (or all fail) has zero advantage: its
rollouts cost time and teach nothing but the KL term. On a family the policy mostly solves (most
templates solved every time, one not) almost every group is such a task. `TemplateCurriculum`
keeps a decayed success count per template from the trainer's own rollouts and weights templates by the Bernoulli variance p(1 - p) of their success (plus a floor, so
no template is ever dropped and a forgotten one is seen again); `draw_tasks` then picks each round's
train tasks template first. The same idea as prioritised level replay's score over levels, with
the group's outcome variance as the score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rehearsal_gym.core.checks import PositiveFloat, UnitFloat, validate

TASK_SAMPLINGS = ("uniform", "template-variance")


@dataclass
class TemplateCurriculum:
    """Decayed per-template success counts and the sampling weights they give."""

    templates: tuple[str, ...]
    floor: PositiveFloat = 0.02  # added to every template's p(1 - p) (at most 0.25)
    decay: UnitFloat = 0.8  # per round: older rounds' episodes count this much less
    wins: dict[str, float] = field(default_factory=dict)
    episodes: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate(self)
        if not self.templates:
            raise ValueError("TemplateCurriculum needs at least one template")
        for t in self.templates:
            self.wins.setdefault(t, 0.0)
            self.episodes.setdefault(t, 0.0)

    def update(self, templates: Sequence[str], successes: Sequence[bool]) -> None:
        """Fold one round's episodes in (templates the family does not have are ignored)."""
        for t in self.templates:
            self.wins[t] *= self.decay
            self.episodes[t] *= self.decay
        for t, s in zip(templates, successes, strict=True):
            if t in self.wins:
                self.wins[t] += float(s)
                self.episodes[t] += 1.0

    def success(self, template: str) -> float:
        """Laplace-smoothed success rate: 0.5 for a template not seen yet."""
        return (self.wins[template] + 1.0) / (self.episodes[template] + 2.0)

    def weights(self) -> np.ndarray:
        """Sampling probabilities over `templates`: p(1 - p) + floor, normalised."""
        p = np.array([self.success(t) for t in self.templates])
        w = p * (1.0 - p) + self.floor
        return w / w.sum()

    def to_dict(self) -> dict:
        return {"wins": dict(self.wins), "episodes": dict(self.episodes)}

    def load_dict(self, state: dict) -> None:
        self.wins.update(state["wins"])
        self.episodes.update(state["episodes"])


def draw_tasks(
    family, rng: np.random.Generator, n: int, weights: np.ndarray, max_draws: int = 10_000
) -> list[int]:
    """`n` train task indices: a template from `weights` (over `family.templates`), then random
    indices until one of that template (templates are drawn evenly by every family's generator)."""
    indices = []
    for template in rng.choice(len(family.templates), size=n, p=weights):
        for _ in range(max_draws):
            index = int(rng.integers(0, 2**31 - 1))
            if family.task("train", index).template == family.templates[template]:
                indices.append(index)
                break
        else:
            raise RuntimeError(
                f"{family.name}: no train task of template {family.templates[template]!r} in {max_draws} draws"
            )
    return indices

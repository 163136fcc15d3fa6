"""Branched rehearsal (MBPO-style): imagined continuations started from real states.

Model-based RL for control (MBPO) rolls its learned model out for a short horizon from states the
real environment reached. `BranchedRehearsalEnv` does the same for tool use: each episode starts
in the real env; unless it is kept fully real (probability `real_ratio`), after `k` real agent
steps it branches into SelfSimEnv, seeded with the real conversation, for at most `horizon`
imagined steps. It is an ordinary Gymnasium env, so every rollout and training loop can use it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from rehearsal_gym.core.model import LM
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv


class BranchedRehearsalEnv(gym.Env[str, str]):
    """Real steps, then an imagined branch from the real state reached.

    ## Arguments
    base: a real env id. model: as SelfSimEnv. k: real agent steps before the branch.
    horizon: imagined steps in the branch (the episode is truncated after them).
    real_ratio: probability that an episode stays real (drawn from the env's seeded RNG).
    Other keyword arguments go to both the real env and SelfSimEnv (split, max_turns, ...).

    ## Info
    ``imagined``: whether this step was answered by the environment role; ``branched``: whether the
    episode branched. Reward: the base verifier (in the branch, on the replayed calls).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        base: str = "ToolCall-v0",
        model: LM | str | None = None,
        k: int = 1,
        horizon: int = 3,
        real_ratio: float = 0.5,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an int >= 0, got {k!r}")
        if not isinstance(horizon, int) or horizon < 1:
            raise ValueError(f"horizon must be a positive int, got {horizon!r}")
        if not 0.0 <= real_ratio <= 1.0:
            raise ValueError(f"real_ratio must be in [0, 1], got {real_ratio!r}")
        sim_keys = {
            "n_examples",
            "n_samples",
            "max_result_tokens",
            "temperature",
            "bank_tasks",
            "bank",
            "cache",
        }
        real_kwargs = {key: v for key, v in kwargs.items() if key not in sim_keys}
        self.real = gym.make(base, render_mode=render_mode, **real_kwargs).unwrapped
        self.sim = SelfSimEnv(base, model=model, mode="replace", render_mode=render_mode, **kwargs)
        self.k, self.horizon, self.real_ratio = k, horizon, real_ratio
        self.render_mode = render_mode
        self.observation_space, self.action_space = self.real.observation_space, self.real.action_space
        self._active: gym.Env = self.real

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        obs, info = self.real.reset(seed=int(self.np_random.integers(2**31 - 1)), options=options)
        self.sim.reset(seed=int(self.np_random.integers(2**31 - 1)))
        self.branches = self.np_random.random() >= self.real_ratio
        self._active, self._history, self._imagined_steps = self.real, [], 0
        info["branched"] = False
        return obs, info

    def step(self, action: str):
        if self.branches and self._active is self.real and len(self._history) == self.k:
            self.sim.reset(options={"task": self.real.task, "history": self._history})
            self._active = self.sim
        obs, reward, terminated, truncated, info = self._active.step(action)
        imagined = self._active is self.sim
        self._history.append((action if isinstance(action, str) else repr(action), obs))
        self._imagined_steps += imagined
        if imagined and not (terminated or truncated) and self._imagined_steps >= self.horizon:
            truncated = True
            info["success"] = False
        info.update(imagined=imagined, branched=imagined)
        return obs, reward, terminated, truncated, info

    def render(self) -> str | None:
        return self._active.render()

    def close(self) -> None:
        self.real.close()
        self.sim.close()

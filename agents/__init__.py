"""Agents: token-level PPO with EnvACE joint roles and SEED distillation, rollouts local or on Ray.

from rehearsal_gym.agents import PPOConfig, train
train(PPOConfig.from_flat(env="Finance-v0", iterations=40), lm, "runs/train")

Modules, in the order data flows through them: config (PPOConfig), train_envs (real or rehearsed
envs), buffer (episodes -> per-role sequences -> advantages -> minibatches), losses (pure tensor
functions), ppo (PPOTrainer: collect -> buffer -> update), callbacks (SEED, curriculum, grounding),
checkpoint, distributed (Ray rollouts), train (the job: evaluate, train, evaluate, write results).
"""

from .buffer import Role, RoleSequence, RolloutBuffer
from .callbacks import TrainerCallback
from .config import PPOConfig
from .ppo import NonFiniteLossError, PPOTrainer
from .train import train

__all__ = [
    "NonFiniteLossError",
    "PPOConfig",
    "PPOTrainer",
    "Role",
    "RoleSequence",
    "RolloutBuffer",
    "TrainerCallback",
    "train",
]

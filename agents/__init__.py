"""Agents: token-level PPO with EnvACE joint roles and SEED distillation, rollouts local or on Ray.

from rehearsal_gym.agents import PPOConfig, train
train(PPOConfig(env="Finance-v0", iterations=40), lm, "runs/train")
"""

from .ppo import NonFiniteLossError, PPOConfig, PPOTrainer
from .train import train

__all__ = ["NonFiniteLossError", "PPOConfig", "PPOTrainer", "train"]

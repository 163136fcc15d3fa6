"""Agents: token-level PPO with EnvACE joint roles and SEED distillation (losses so far)."""

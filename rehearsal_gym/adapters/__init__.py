"""Adapters to other libraries: token-level envs and LM policies for stable-baselines3 / sb3-contrib."""

"""Stable-Baselines3 PPO on a real tool env, one token per action, training the package's LM.

    python examples/sb3_ppo_real.py --env ToolCall-v0 --steps 1024

The policy is the embedded default model (shipped trained); SB3 trains its weights directly.
"""

import argparse

from stable_baselines3 import PPO

from rehearsal_gym.adapters.sb3 import LMPolicy, evaluate_success
from rehearsal_gym.adapters.token_env import TokenEnv
from rehearsal_gym.defaults import default_lm

parser = argparse.ArgumentParser()
parser.add_argument("--env", default="ToolCall-v0")
parser.add_argument("--steps", type=int, default=1024)
parser.add_argument("--eval-tasks", type=int, default=10)
args = parser.parse_args()

lm = default_lm()
env = TokenEnv(args.env, lm, env_kwargs={"split": "train"})
model = PPO(
    LMPolicy,
    env,
    policy_kwargs={"lm": lm},
    n_steps=256,
    batch_size=64,
    n_epochs=2,
    learning_rate=1e-5,
    seed=0,
)
print(f"held-out success before: {evaluate_success(model, args.env, args.eval_tasks, tokenizer=lm):.0%}")
model.learn(args.steps, progress_bar=True)
print(
    f"held-out success after {args.steps} token steps: {evaluate_success(model, args.env, args.eval_tasks, tokenizer=lm):.0%}"
)

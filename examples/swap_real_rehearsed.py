"""One argument swaps the real env for the policy's own rehearsal of it.

    python examples/swap_real_rehearsed.py --world real
    python examples/swap_real_rehearsed.py --world rehearsed

The training code below does not change; only the env passed to SB3 does. Both are evaluated
in the real env on held-out tasks.
"""

import argparse

import gymnasium as gym
from sb3_contrib import MaskablePPO

import rehearsal_gym  # noqa: F401 - registers the env ids
from rehearsal_gym.adapters.sb3 import MaskableLMPolicy, evaluate_success
from rehearsal_gym.adapters.token_env import TokenEnv
from rehearsal_gym.defaults import default_lm

parser = argparse.ArgumentParser()
parser.add_argument("--env", default="ToolCall-v0")
parser.add_argument("--world", choices=["real", "rehearsed"], default="real")
parser.add_argument("--steps", type=int, default=512)
args = parser.parse_args()

lm = default_lm()
if args.world == "real":
    text_env = gym.make(args.env, split="train")
else:
    text_env = gym.make(
        "SelfSim-v0", base=args.env, model=lm, mode="replace", split="train", max_result_tokens=96
    )

model = MaskablePPO(
    MaskableLMPolicy,
    TokenEnv(text_env, lm),
    policy_kwargs={"lm": lm},
    n_steps=256,
    batch_size=64,
    learning_rate=1e-5,
    seed=0,
)
model.learn(args.steps)
print(f"{args.world}: real-env held-out success {evaluate_success(model, args.env, 10, tokenizer=lm):.0%}")

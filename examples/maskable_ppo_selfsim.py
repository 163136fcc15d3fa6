"""MaskablePPO in the policy's own imagination (SelfSim-v0), evaluated in the real env.

    python examples/maskable_ppo_selfsim.py --env Finance-v0 --steps 1024

Grammar masks keep every turn a valid tool call or answer. The environment role shares the
policy's weights (EnvACE), so what SB3 learns as agent also changes the imagined world.
"""

import argparse

from sb3_contrib import MaskablePPO

from rehearsal_gym.adapters.sb3 import MaskableLMPolicy, evaluate_success
from rehearsal_gym.adapters.token_env import TokenEnv
from rehearsal_gym.defaults import default_lm
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv

parser = argparse.ArgumentParser()
parser.add_argument("--env", default="Finance-v0")
parser.add_argument("--steps", type=int, default=1024)
parser.add_argument("--eval-tasks", type=int, default=10)
args = parser.parse_args()

lm = default_lm()
rehearsal = SelfSimEnv(args.env, model=lm, mode="replace", split="train", max_result_tokens=96)
env = TokenEnv(rehearsal, lm)
model = MaskablePPO(
    MaskableLMPolicy,
    env,
    policy_kwargs={"lm": lm},
    n_steps=256,
    batch_size=64,
    n_epochs=2,
    learning_rate=1e-5,
    seed=0,
)
print(
    f"real-env held-out success before: {evaluate_success(model, args.env, args.eval_tasks, tokenizer=lm):.0%}"
)
model.learn(args.steps, progress_bar=True)
print(
    f"real-env held-out success after {args.steps} rehearsed token steps: {evaluate_success(model, args.env, args.eval_tasks, tokenizer=lm):.0%}"
)

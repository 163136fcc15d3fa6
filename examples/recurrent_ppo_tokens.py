"""sb3-contrib RecurrentPPO with its own LSTM policy on the token wrapper (no LM needed).

    python examples/recurrent_ppo_tokens.py --env Retail-v0 --steps 2048

A from-scratch LSTM over token ids will not solve these tasks in a minute; the point is that the
token wrapper is an ordinary Gymnasium env that any SB3 algorithm accepts.
"""

import argparse

from sb3_contrib import RecurrentPPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rehearsal_gym.adapters.sb3 import evaluate_success
from rehearsal_gym.adapters.token_env import TokenEnv

parser = argparse.ArgumentParser()
parser.add_argument("--env", default="Retail-v0")
parser.add_argument("--steps", type=int, default=2048)
args = parser.parse_args()

venv = DummyVecEnv(
    [lambda: TokenEnv(args.env, window=512, max_turn_tokens=32, env_kwargs={"split": "train"})] * 4
)
model = RecurrentPPO(
    "MultiInputLstmPolicy", venv, n_steps=128, batch_size=128, seed=0, policy_kwargs={"lstm_hidden_size": 64}
)
model.learn(args.steps, progress_bar=True)
print(f"held-out success: {evaluate_success(model, args.env, 5, max_turn_tokens=32):.0%}")

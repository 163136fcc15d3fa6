"""rehearsal-gym: real tool environments and the policy's world-rehearsal role as Gymnasium envs.

Importing the package registers the real tool envs ``ToolCall-v0``, ``Retail-v0``, ``Finance-v0``
and the world-rehearsal env ``SelfSim-v0``.
"""

from __future__ import annotations

import gymnasium as gym

__version__ = "0.1.0"


def _register() -> None:
    for env_id, entry in {
        "ToolCall-v0": "rehearsal_gym.envs.function_calling:FunctionCallingEnv",
        "Retail-v0": "rehearsal_gym.envs.retail:RetailEnv",
        "Finance-v0": "rehearsal_gym.envs.finance:FinanceEnv",
        "SelfSim-v0": "rehearsal_gym.selfsim:SelfSimEnv",
    }.items():
        if env_id not in gym.registry:
            vector = "rehearsal_gym.selfsim:SelfSimVectorEnv" if env_id == "SelfSim-v0" else None
            gym.register(env_id, entry_point=entry, vector_entry_point=vector, max_episode_steps=None)


_register()

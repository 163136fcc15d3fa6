"""rehearsal-gym: real tool environments and the policy's world-rehearsal role as Gymnasium envs.

Importing the package registers the real tool envs ``ToolCall-v0``, ``Retail-v0``, ``Finance-v0``
and the world-rehearsal env ``SelfSim-v0``. ``make_tool_env(toolbox, tasks, reward)`` makes a tool
env of a user's own tools (`ToolTask` is one of its tasks), ``make_mcp_env(command, tasks, reward)``
one of an MCP server's tools; ``SelfSimEnv`` rehearses any of them.
``rehearsal_gym.default_lm()`` loads the shipped default model and ``rehearsal_gym.LM`` any other.
"""

from __future__ import annotations

import gymnasium as gym

from rehearsal_gym.envs import ToolEnv, ToolError, ToolTask, make_mcp_env, make_tool_env

__version__ = "0.1.0"


def _register() -> None:
    from rehearsal_gym.envs import ENV_IDS

    entries = {env_id: f"{cls.__module__}:{cls.__qualname__}" for env_id, cls in ENV_IDS.items()}
    entries["SelfSim-v0"] = "rehearsal_gym.rehearsal.selfsim:SelfSimEnv"
    entries["BFCL-v0"] = "rehearsal_gym.envs.bfcl:BFCLEnv"  # needs bfcl-eval (docs/envs.md)
    for env_id, entry in entries.items():
        if env_id not in gym.registry:
            vector = "rehearsal_gym.rehearsal.selfsim:SelfSimVectorEnv" if env_id == "SelfSim-v0" else None
            gym.register(env_id, entry_point=entry, vector_entry_point=vector, max_episode_steps=None)


_register()


def __getattr__(name: str):
    # the model code imports torch and transformers: loaded on first use, not on `import rehearsal_gym`
    if name == "default_lm":
        from rehearsal_gym.defaults import default_lm

        return default_lm
    if name in ("SelfSimEnv", "ResultBank"):
        from rehearsal_gym.rehearsal import roles, selfsim

        return getattr(selfsim if name == "SelfSimEnv" else roles, name)
    if name == "LM":
        from rehearsal_gym.core.model import LM

        return LM
    raise AttributeError(f"module 'rehearsal_gym' has no attribute {name!r}")


__all__ = [
    "LM",
    "ResultBank",
    "SelfSimEnv",
    "ToolEnv",
    "ToolError",
    "ToolTask",
    "default_lm",
    "make_mcp_env",
    "make_tool_env",
]

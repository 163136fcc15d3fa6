"""Real tool environments: function calling, retail customer service (SQLite), finance (SQLite),
`make_tool_env`, which makes one of a user's own toolbox class, and `make_mcp_env`, one of an MCP
server's tools."""

from .base import Backend, Family, Task, ToolEnv, ToolError
from .explain import explain
from .finance import FinanceEnv, FinanceFamily
from .function_calling import FunctionCallingEnv, FunctionCallingFamily
from .mcp_env import MCPFamily, make_mcp_env
from .retail import RetailEnv, RetailFamily
from .toolbox import ToolboxFamily, ToolTask, make_tool_env

ENV_IDS = {"ToolCall-v0": FunctionCallingEnv, "Retail-v0": RetailEnv, "Finance-v0": FinanceEnv}
"""Registered id -> env class of every real tool environment (the one registry of env ids)."""
REAL_ENV_IDS = tuple(ENV_IDS)

__all__ = [
    "ENV_IDS",
    "REAL_ENV_IDS",
    "Backend",
    "Family",
    "FinanceEnv",
    "FinanceFamily",
    "FunctionCallingEnv",
    "FunctionCallingFamily",
    "MCPFamily",
    "RetailEnv",
    "RetailFamily",
    "Task",
    "ToolEnv",
    "ToolError",
    "ToolTask",
    "ToolboxFamily",
    "explain",
    "make_mcp_env",
    "make_tool_env",
]

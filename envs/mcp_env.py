"""Any MCP server's tools as a Gymnasium env (the optional extra ``rehearsal-gym[mcp]``).

    env = make_mcp_env([sys.executable, "server.py"], tasks, reward)

`command` starts a Model Context Protocol server over stdio (the `mcp` SDK's client). The tools
it lists, with their input schemas, are the env's tools; a valid call is sent as ``tools/call`` and
its result is the observation: the structured content, or the text content as a JSON object when
it is one, else ``{"result": text}``. A tool error is a refused call, ``{"error": text}``.

Episode isolation: by default every episode starts a fresh server process (correct for any
server). ``reset="tool_name"`` keeps one server and calls that tool at the start of each episode
instead (for servers that offer a reset); the server is started again if it died.

A server that dies, hangs past `tool_timeout` or writes garbage gives the agent an error
observation and the episode fails; the next episode starts a clean server. Nothing raises in
`step`. `reward(task, toolbox, answer)` works as in `make_tool_env`, with `toolbox` a proxy whose
methods call the server's tools (``toolbox.get(key="a")`` returns the result), so a reward reads the
server's final state through its own tools.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rehearsal_gym.core.protocol import ToolCall, ToolSpec

from .base import ToolEnv, ToolError
from .toolbox import TaskSource, ToolboxBackend, ToolboxFamily, ToolTask, tool_result


def _mcp():
    try:
        import mcp
        from mcp.client.stdio import stdio_client
    except ImportError as e:
        raise ImportError("MCP envs need the mcp SDK: pip install 'rehearsal-gym[mcp]'") from e
    return mcp, stdio_client


def mcp_result(result: Any) -> dict[str, Any]:
    """A ``tools/call`` result as a JSON-object result; raises ToolError for a tool error."""
    text = "\n".join(c.text for c in result.content or [] if getattr(c, "type", "") == "text")
    if result.is_error:
        raise ToolError(text[:300] or "the tool failed")
    if isinstance(result.structured_content, dict) and result.structured_content:
        return tool_result(result.structured_content)
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    return tool_result(value)


class MCPConnection:
    """One MCP server process and its client session, driven from synchronous code.

    The session lives in one task of an event loop on a thread of its own; `call` sends a request
    and waits at most `timeout` seconds. Attribute access gives tool proxies: ``conn.get(key="a")``.
    """

    def __init__(self, command: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> None:
        mcp, stdio_client = _mcp()
        if isinstance(command, str) or not command:
            raise ValueError(f"command must be a non-empty list of strings, got {command!r}")
        self.timeout, self.broken = timeout, ""
        self._params = mcp.StdioServerParameters(
            command=command[0], args=list(command[1:]), env={**os.environ, **dict(env or {})}
        )
        self._stdio_client, self._client_session = stdio_client, mcp.ClientSession
        self.tools: list[Any] = []
        self._started, self._start_error = threading.Event(), ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="mcp-client")
        self._thread.start()
        self._stop = asyncio.Event()
        self._task = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)
        if not self._started.wait(timeout) or self._start_error:
            self.close()
            raise RuntimeError(
                self._start_error or f"the MCP server {command[0]!r} did not start within {timeout} s"
            )

    async def _serve(self) -> None:
        """Open the server and the session, list the tools, and hold them until stopped (one task
        enters and exits the SDK's contexts, as anyio requires)."""
        try:
            with open(os.devnull, "w") as errlog:
                async with self._stdio_client(self._params, errlog=errlog) as (read, write):
                    async with self._client_session(read, write) as session:
                        await session.initialize()
                        self.session = session
                        self.tools = list((await session.list_tools()).tools)
                        self._started.set()
                        await self._stop.wait()
        except BaseException as e:  # noqa: BLE001 - a server that fails to start or dies
            if not self._started.is_set():
                self._start_error = f"the MCP server failed to start: {type(e).__name__}: {str(e)[:200]}"
                self._started.set()
            self.broken = self.broken or f"the MCP server stopped ({type(e).__name__})"

    def _wait(self, coro, what: str) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout=self.timeout)
        except TimeoutError:
            future.cancel()
            self.broken = f"the MCP server did not answer ({what}) within {self.timeout} s"
            raise ToolError(self.broken) from None

    def call(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The result of tool `name` (a JSON object); ToolError for a refusal, a dead or hung server."""
        if self.broken:
            raise ToolError(f"the MCP server is unavailable: {self.broken}")
        if self._task.done():
            self.broken = "the MCP server stopped"
            raise ToolError(self.broken)
        try:
            result = self._wait(self.session.call_tool(name, dict(arguments)), name)
        except ToolError:
            raise
        except Exception as e:  # the connection failed: a dead server, garbage on its stdout
            self.broken = f"the MCP server failed during {name}: {type(e).__name__}"
            raise ToolError(self.broken) from None
        return mcp_result(result)

    def __getattr__(self, name: str) -> Callable[..., dict[str, Any]]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda **arguments: self.call(name, arguments)

    def close(self) -> None:
        """Stop the session and the server process (the SDK terminates it), then the loop."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._stop.set)
        try:
            self._task.result(timeout=self.timeout)
        except Exception:  # noqa: BLE001 - a server that will not stop is left to the SDK's kill
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()


def tool_specs(tools: Sequence[Any]) -> dict[str, ToolSpec]:
    """The env's tools from an MCP ``tools/list``; names this package cannot call are skipped with
    a warning."""
    specs, skipped = {}, []
    for tool in tools:
        schema = {"type": "object", **(tool.input_schema or {})}
        description = (tool.description or tool.name).strip().splitlines()[0]
        try:  # ToolSpec's own checks: an identifier name, an object schema
            specs[tool.name] = ToolSpec(tool.name, description, schema)
        except ValueError:
            skipped.append(tool.name)
    if skipped:
        warnings.warn(
            f"MCP tools skipped (name or schema not usable): {skipped}", RuntimeWarning, stacklevel=3
        )
    if not specs:
        raise ValueError("the MCP server lists no usable tools")
    return specs


class MCPBackend(ToolboxBackend):
    """An episode's server connection, called on the episode's worker thread with a time limit."""

    def call(self, call: ToolCall) -> dict[str, Any]:
        self.calls += 1
        return self.run(self.toolbox.call, call.name, call.arguments)


class MCPFamily(ToolboxFamily):
    """A `ToolboxFamily` whose toolbox is an MCP server (see the module docstring)."""

    def __init__(
        self,
        command: Sequence[str],
        tasks: TaskSource,
        reward: Callable[[ToolTask, Any, str], float | bool],
        *,
        reset: str | None = None,
        server_env: Mapping[str, str] | None = None,
        tool_timeout: float = 30.0,
        **kwargs: Any,
    ) -> None:
        if isinstance(command, str) or not command or not all(isinstance(c, str) for c in command):
            raise ValueError(f"command must be a non-empty list of strings (argv), got {command!r}")
        self.command, self.reset_tool, self.server_env = list(command), reset, dict(server_env or {})
        self._shared: MCPConnection | None = None
        self.call_timeout = 0.9 * tool_timeout  # a hung call is the connection's to detect, first
        probe = MCPConnection(self.command, tool_timeout, self.server_env)  # the tools, once
        try:
            tools = tool_specs(probe.tools)
        finally:
            probe.close()
        if reset is not None and reset not in {t.name for t in probe.tools}:
            raise ValueError(f"reset={reset!r} is not a tool of the server; it lists {sorted(tools)}")
        tools.pop(reset, None)  # the agent never resets the world itself
        kwargs.setdefault("name", "mcp")
        super().__init__(self._connect, tasks, reward, tools=tools, tool_timeout=tool_timeout, **kwargs)

    def _connect(self, task: ToolTask) -> MCPConnection | _Shared:
        """An episode's server: a fresh process, or the shared one after its reset tool."""
        if self.reset_tool is None:
            return MCPConnection(self.command, self.call_timeout, self.server_env)
        if self._shared is None or self._shared.broken or self._shared._task.done():
            if self._shared is not None:  # stopping a hung server may take a while: not on this path
                threading.Thread(target=self._shared.close, daemon=True).start()
            self._shared = MCPConnection(self.command, self.call_timeout, self.server_env)
            weakref.finalize(self, self._shared.close)
        self._shared.call(self.reset_tool, {})
        return _Shared(self._shared)

    def make_backend(self, task: ToolTask) -> MCPBackend:
        return MCPBackend(self, task)


class _Shared:
    """An episode's view of the shared server: its tools, and a close that leaves it running."""

    def __init__(self, connection: MCPConnection) -> None:
        self._connection = connection
        self.call = connection.call

    def __getattr__(self, name: str) -> Callable[..., dict[str, Any]]:
        return getattr(self._connection, name)

    def close(self) -> None:
        """The server stays up for the next episode (its reset tool clears it)."""


def make_mcp_env(
    command: Sequence[str],
    tasks: TaskSource,
    reward: Callable[[ToolTask, Any, str], float | bool],
    *,
    reset: str | None = None,
    server_env: Mapping[str, str] | None = None,
    test_tasks: Sequence[ToolTask] | None = None,
    oracle: Callable[[ToolTask], list[str]] | None = None,
    max_turns: int = 8,
    name: str = "mcp",
    tool_timeout: float = 30.0,
    success_threshold: float = 1.0,
    **env_kwargs: Any,
) -> ToolEnv:
    """A Gymnasium env (a `ToolEnv`) of an MCP server's tools; see the module docstring.

    command: the server's command line (``[sys.executable, "server.py"]``). reset: a tool that
    resets the server's state, called at each episode start instead of a fresh process.
    server_env: extra environment variables for the server. tool_timeout: seconds a start, a call
    or the reward may take. tasks, reward, test_tasks, oracle, success_threshold and the other
    keyword arguments as `make_tool_env`.
    """
    family = MCPFamily(
        command,
        tasks,
        reward,
        reset=reset,
        server_env=server_env,
        tool_timeout=tool_timeout,
        test_tasks=test_tasks,
        oracle=oracle,
        name=name,
        success_threshold=success_threshold,
    )
    return ToolEnv(family=family, max_turns=max_turns, **env_kwargs)

"""A small stateful MCP server for the tests: a key-value store over stdio, plus tools that
misbehave (crash, hang, write garbage). Every tool call is counted in the file $KV_CALLS."""

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

app = MCPServer("kv")
store: dict[str, str] = {}


def _count() -> None:
    path = os.environ.get("KV_CALLS")
    if path:
        with open(path, "a") as f:
            f.write("x")


@app.tool()
def put(key: str, value: str) -> dict:
    """Store a value under a key."""
    _count()
    store[key] = value
    return {"ok": True, "size": len(store)}


@app.tool()
def get(key: str) -> dict:
    """Read the value stored under a key."""
    _count()
    if key not in store:
        raise ValueError(f"no key {key!r}")
    return {"key": key, "value": store[key]}


@app.tool()
def size() -> int:
    """How many keys are stored."""
    _count()
    return len(store)


@app.tool()
def clear() -> str:
    """Forget every key."""
    store.clear()
    return "cleared"


@app.tool()
def crash() -> str:
    """Stop the server at once."""
    _count()
    os._exit(3)


@app.tool()
def hang() -> str:
    """Never answer."""
    _count()
    time.sleep(3600)
    return "late"


@app.tool()
def garbage() -> str:
    """Write something that is not a JSON-RPC message."""
    _count()
    sys.stdout.write("this is not json\n{{{\n")
    sys.stdout.flush()
    return "after garbage"


if __name__ == "__main__":
    app.run()

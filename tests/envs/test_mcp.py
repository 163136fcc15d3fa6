"""MCP servers as envs: a stateful key-value server written here (tests/envs/mcp_kv_server.py),
started over stdio by the mcp SDK's client."""

import json
import sys
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env
from rehearsal_gym.envs import ToolTask

from rehearsal_gym.rehearsal.selfsim import SelfSimEnv

pytest.importorskip("mcp")
from rehearsal_gym.envs.mcp_env import make_mcp_env  # noqa: E402

SERVER = [sys.executable, str(Path(__file__).with_name("mcp_kv_server.py"))]
TASKS = [
    ToolTask(f"Store the value {i} under the key k{i}, then answer with the number of keys.", {"i": i})
    for i in range(40)
]


def reward(task, toolbox, answer):
    """The server's own tools read its final state."""
    i = task.data["i"]
    return toolbox.get(key=f"k{i}")["value"] == str(i) and answer.strip() == str(toolbox.size()["result"])


def solve(env) -> tuple[float, dict]:
    i = env.unwrapped.task.data["i"]
    env.step(f'CALL put {{"key": "k{i}", "value": "{i}"}}')
    _, r, terminated, _, info = env.step("ANSWER 1")
    assert terminated
    return r, info


@pytest.fixture
def calls(tmp_path):
    """The file the server counts its tool calls in, and a reader."""
    path = tmp_path / "calls"
    path.write_text("")
    return path, lambda: len(path.read_text())


def test_an_mcp_server_is_a_conforming_env_with_its_own_tools_and_state(calls):
    path, count = calls
    env = make_mcp_env(
        SERVER, TASKS, reward, reset="clear", server_env={"KV_CALLS": str(path)}, tool_timeout=20
    )
    assert set(env.unwrapped.tools) == {
        "put",
        "get",
        "size",
        "crash",
        "hang",
        "garbage",
    }  # not the reset tool
    assert env.unwrapped.tools["put"].required == ["key", "value"]
    check_env(env.unwrapped)
    obs, _ = env.reset(options={"task_index": 0})
    assert "put(key: string, value: string)" in obs
    assert solve(env)[0] == 1.0
    env.reset(options={"task_index": 1})
    r, info = solve(env)
    assert r == 1.0 and info["success"]  # the reward read the server's state through its tools
    env.reset(options={"task_index": 2})
    obs = env.step('CALL get {"key": "missing"}')[0]
    assert "error" in json.loads(obs)  # the server's refusal, shown to the agent
    obs = env.step('CALL put {"key": 3}')[0]
    assert obs.startswith("error: tool 'put'")  # checked against the listed schema, never sent
    assert env.step("CALL size {}")[0] == '{"result": 0}'  # the reset tool cleared the last episode
    assert count() > 0
    env.close()


def test_each_episode_gets_a_fresh_server_by_default():
    env = make_mcp_env(SERVER, TASKS, reward, tool_timeout=20)
    env.reset(options={"task_index": 0})
    env.step('CALL put {"key": "a", "value": "1"}')
    assert json.loads(env.step("CALL size {}")[0]) == {"result": 1}
    env.reset(options={"task_index": 1})
    assert json.loads(env.step("CALL size {}")[0]) == {"result": 0}
    env.close()


@pytest.mark.parametrize("tool", ["crash", "hang", "garbage"])
def test_a_misbehaving_server_gives_error_observations_and_a_clean_next_episode(tool):
    env = make_mcp_env(SERVER, TASKS, reward, reset="clear", tool_timeout=5)
    env.reset(options={"task_index": 0})
    env.step('CALL put {"key": "a", "value": "1"}')
    obs, reward_, terminated, truncated, info = env.step(f"CALL {tool} {{}}")
    assert env.observation_space.contains(obs)
    after = json.loads(env.step("CALL size {}")[0])
    if tool == "garbage":  # the SDK skips a line that is not JSON-RPC; the server goes on
        assert after == {"result": 1}
    else:
        assert "error" in json.loads(obs) and "unavailable" in after["error"]
    env.reset(options={"task_index": 1})
    assert json.loads(env.step("CALL size {}")[0]) == {"result": 0}  # a clean (restarted) server
    env.close()


def test_selfsim_replaces_and_wraps_an_mcp_env(tiny_lm, scripted, calls):
    path, count = calls
    env = make_mcp_env(
        SERVER, TASKS, reward, reset="clear", server_env={"KV_CALLS": str(path)}, tool_timeout=20
    )
    sim = SelfSimEnv(env, model=tiny_lm, mode="replace", max_result_tokens=8)
    sim.reset(options={"task_index": 0})
    for _ in range(3):
        _, _, terminated, _, info = sim.step('CALL put {"key": "k", "value": "v"}')
        assert info["imagined"]
        if terminated:
            break
    assert count() == 0  # replace mode never contacted the server during the episode
    world = scripted(['{"ok": true, "size": 2}'])  # a world that gets one of two fields right
    wrap = SelfSimEnv(env, model=world, mode="wrap", max_result_tokens=64)
    wrap.reset(options={"task_index": 0})
    obs, _, _, _, info = wrap.step('CALL put {"key": "k", "value": "v"}')
    assert json.loads(obs) == {"ok": True, "size": 2} and dict(info["real_result"]) == {"ok": True, "size": 1}
    assert info["fidelity"] == {"exact": 0.0, "field_accuracy": 0.5, "hallucinated_fields": 0.0}
    assert count() == 1
    mixed = SelfSimEnv(env, model=world, mode="mixed", p_real=1.0, max_result_tokens=64)
    mixed.reset(options={"task_index": 0})
    assert not mixed.step("CALL size {}")[4]["imagined"]  # p_real=1: every call is real
    assert count() == 2


def test_a_server_that_cannot_start_is_a_clear_error():
    with pytest.raises(RuntimeError, match="MCP server"):
        make_mcp_env([sys.executable, "-c", "import sys; sys.exit(2)"], TASKS, reward, tool_timeout=10)
    with pytest.raises(ValueError, match="reset='nope' is not a tool"):
        make_mcp_env(SERVER, TASKS, reward, reset="nope", tool_timeout=20)
    with pytest.raises(ValueError, match="command"):
        make_mcp_env("python server.py", TASKS, reward)

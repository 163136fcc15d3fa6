"""BFCL-v0: the Berkeley Function Calling Leaderboard's multi-turn tasks, its API classes as the
backend and its own checker as the reward (needs `pip install --no-deps bfcl-eval`; CI installs it)."""

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import rehearsal_gym  # noqa: F401 - registers BFCL-v0
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv

pytest.importorskip("bfcl_eval")
from rehearsal_gym.envs.bfcl import _schema, call_string  # noqa: E402


@pytest.fixture(scope="module")
def env():
    return gym.make("BFCL-v0")


def _task(env, task_id):
    family = env.unwrapped.family
    return next(t for split in family.splits.values() for t in split if t.id == task_id)


def _play(env, turns):
    for turn in turns:
        obs, reward, terminated, truncated, info = env.step(turn)
        if terminated or truncated:
            return reward, info
    raise AssertionError("the episode did not end")


def test_the_oracle_passes_bfcls_own_checker(env):
    family = env.unwrapped.family
    assert len(family.splits["train"]) + len(family.splits["test"]) == 200
    for split in ("train", "test"):
        env.unwrapped.split = split
        for i in range(4):
            env.reset(options={"task_index": i})
            reward, info = _play(env, env.unwrapped.oracle_turns())
            assert reward == 1.0 and info["success"], env.unwrapped.task.id


def test_requests_come_one_at_a_time_and_a_wrong_episode_fails_the_checker(env):
    task = _task(env, "multi_turn_base_0")
    obs, _ = env.reset(options={"task": task})
    assert obs.endswith("Request: " + task.data["entry"]["question"][0][0]["content"])
    assert "mkdir(dir_name: string)" in obs and "post_tweet(" in obs  # only this task's classes' tools
    assert "get_stock_info" not in obs
    turns = env.unwrapped.oracle_turns()
    first = turns.index("ANSWER Done.")
    for turn in turns[:first]:
        env.step(turn)
    obs, reward, terminated, _, _ = env.step("ANSWER Done.")
    assert not terminated and reward == 0.0
    assert obs == "Request: " + task.data["entry"]["question"][1][0]["content"]
    # skip the second request's calls: BFCL's checker fails the episode
    rest = [t for t in turns[first + 1 :] if t != turns[first + 1]]
    reward, info = _play(env, rest)
    assert reward == 0.0 and not info["success"]
    verdict = env.unwrapped.family.check(task, [[]])
    assert not verdict["valid"] and "empty" in verdict["error_type"]


def test_recorded_calls_are_not_rewritten_by_the_api_classes(env):
    # post_tweet keeps its `mentions` list and mention() extends it later; the checker must see the
    # calls as the agent made them
    env.reset(options={"task": _task(env, "multi_turn_base_147")})
    reward, _ = _play(env, env.unwrapped.oracle_turns())
    assert reward == 1.0
    assert [c.arguments.get("mentions") for c in env.unwrapped.calls if c.name == "post_tweet"] == [
        ["@industryexperts"]
    ]


def test_results_the_api_classes_cannot_put_in_json_are_shown_plainly(env):
    env.reset(options={"task": _task(env, "multi_turn_base_57")})  # MathAPI returns mpmath numbers
    observations = [env.step(turn)[0] for turn in env.unwrapped.oracle_turns()]
    assert not any("not JSON" in o for o in observations) and observations[-1].endswith("success")


def test_conformance_and_hostile_calls(env):
    check_env(env.unwrapped)
    env.reset(options={"task": _task(env, "multi_turn_base_0")})
    for action in [
        'CALL rm {"file_name": "../../etc/passwd"}',
        'CALL __import__ {"name": "os"}',
        "CALL cd {}",
    ]:
        obs = env.step(action)[0]
        assert "error" in obs
    assert env.step('CALL get_stock_info {"symbol": "OMEG"}')[0].startswith(
        "error: unknown tool 'get_stock_info'"
    )


def test_selfsim_rehearses_bfcl_and_scores_with_its_checker(scripted):
    sim = SelfSimEnv(
        "BFCL-v0",
        model=scripted(['{"current_working_directory": "document"}']),
        mode="replace",
        max_result_tokens=64,
    )
    sim.reset(options={"task_index": 0})
    _, _, _, _, info = sim.step('CALL cd {"folder": "document"}')
    assert info["imagined"] and sim._backend is None  # replace mode never made the API classes
    reward = _play(sim, ["ANSWER Done."] * 4)[0]
    assert reward == 0.0  # the checker judged the one call against the ground truth: not enough


@pytest.mark.parametrize("mode", ["wrap", "mixed"])
def test_selfsim_wraps_and_mixes_bfcl(scripted, mode):
    world = scripted(['{"current_working_directory": "document"}'])
    sim = SelfSimEnv("BFCL-v0", model=world, mode=mode, p_real=0.5, max_result_tokens=64)
    sim.reset(seed=1, options={"task_index": 0})
    turns = sim.oracle_turns()
    info = sim.step(turns[0])[4]
    assert isinstance(info["imagined"], bool)
    if info["imagined"] and mode == "wrap":
        assert "fidelity" in info and "real_result" in info


def test_schema_and_call_text():
    assert _schema(
        {
            "type": "dict",
            "properties": {"x": {"type": "float"}, "t": {"type": "tuple", "items": {"type": "any"}}},
        }
    ) == {
        "type": "object",
        "properties": {"x": {"type": "number"}, "t": {"type": "array", "items": {}}},
    }
    from rehearsal_gym.core.protocol import ToolCall

    assert (
        call_string(ToolCall("mv", {"source": "a'b", "n": 2, "ok": True}))
        == 'mv(source="a\'b", n=2, ok=True)'
    )

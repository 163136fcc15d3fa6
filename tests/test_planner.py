import gymnasium as gym
import pytest
from rehearsal_gym.envs.base import to_observation

from rehearsal_gym.core.rollout import run_episodes
from rehearsal_gym.rehearsal.planner import RehearsalConfig, RehearsalPlanner


def test_budget_zero_is_the_greedy_policy(tiny_lm):
    planner = RehearsalPlanner(tiny_lm, "ToolCall-v0", RehearsalConfig(n=0, max_turn_tokens=24))
    env = gym.make("ToolCall-v0", split="test", max_turns=2)
    planned = planner.run_episode(env, {"task_index": 0})
    greedy = run_episodes(
        tiny_lm, [gym.make("ToolCall-v0", split="test", max_turns=2)], [{"task_index": 0}], max_turn_tokens=24
    )[0]
    assert env.unwrapped.transcript[1][1] == to_observation(greedy.actions[0])
    assert planned == greedy.success and planner.rehearsals == 0


@pytest.mark.parametrize("sequential", [False, True])
def test_rehearsal_runs_and_never_touches_the_real_env_while_rehearsing(tiny_lm, sequential):
    config = RehearsalConfig(n=2, horizon=2, sequential=sequential, max_turn_tokens=16)
    planner = RehearsalPlanner(tiny_lm, "Retail-v0", config)
    env = gym.make("Retail-v0", split="test", max_turns=2)
    real_steps = []
    step = env.unwrapped.step
    env.unwrapped.step = lambda action: real_steps.append(action) or step(action)
    planner.run_episode(env, {"task_index": 1})
    decisions = len(real_steps)  # one committed action per decision reached the real env, no more
    assert decisions >= 1 and [a for role, a in env.unwrapped.transcript if role == "agent"] == [
        to_observation(a) for a in real_steps
    ]
    if sequential:  # stops at the first candidate that passes
        assert decisions <= planner.rehearsals <= config.n * decisions
    else:  # every candidate of every decision is rehearsed, in the SelfSimEnv only
        assert planner.rehearsals == config.n * decisions


@pytest.mark.parametrize("sequential, rehearsed", [(False, 3), (True, 1)])
def test_only_a_sequential_planner_stops_at_the_first_candidate_that_passes(tiny_lm, sequential, rehearsed):
    planner = RehearsalPlanner(
        tiny_lm, "ToolCall-v0", RehearsalConfig(n=3, sequential=sequential, max_turn_tokens=8)
    )
    seen = []
    planner.rehearse = lambda task, history, candidate: seen.append(candidate) or True  # every one passes
    env = gym.make("ToolCall-v0")
    env.reset(options={"task_index": 0})
    choice = planner.choose(env.unwrapped.task, list(env.unwrapped.transcript), [])
    assert len(seen) == rehearsed and choice == seen[0]


def test_branch_from_real_history(tiny_lm):
    planner = RehearsalPlanner(tiny_lm, "Finance-v0", RehearsalConfig(n=1))
    env = gym.make("Finance-v0")
    env.reset(options={"task_index": 3})
    turn = env.unwrapped.oracle_turns()[0]
    obs = env.step(turn)[0]
    sim = planner.sim
    sim_obs, info = sim.reset(options={"task": env.unwrapped.task, "history": [(turn, obs)]})
    assert sim_obs == obs and info["turn"] == 1 and sim.transcript == env.unwrapped.transcript


def test_config_validation():
    with pytest.raises(ValueError, match="n must"):
        RehearsalConfig(n=-1)
    with pytest.raises(ValueError, match="horizon"):
        RehearsalConfig(horizon=0)
